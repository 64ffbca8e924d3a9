"""Reliability diagrams from Python, as relplot and scikit-learn's CalibrationDisplay give them: the
per-bin accuracy against confidence with each bin's count, and the consistency band (the central range
of accuracies a calibrated model would show in a bin of n examples with mean confidence c: exact
quantiles of Binomial(n, c) / n, Bröcker & Smith 2007; the band `arcal report` and `arcal metrics
--figures` draw, src/calib/binning.cpp calibrated_accuracy_band). The figure's data is returned
whatever is installed; the drawing needs matplotlib (Debian's python3-matplotlib, optional) and is
skipped without it."""
import numpy as np

from . import _arcal
from ._inputs import prediction_arrays

__all__ = ["reliability_diagram"]


def _binomial_band(n, c, level):
    """calibrated_accuracy_band: the central `level` quantiles of Binomial(n, c) / n (log-space pmf)."""
    if n == 0 or not 0 <= c <= 1:
        return np.nan, np.nan
    if c == 0 or c == 1:
        return float(c), float(c)
    lo_q = 0.5 * (1 - level)
    hi_q = 1 - lo_q
    k = np.arange(1, n + 1, dtype=np.float64)
    log_pmf = n * np.log1p(-c) + np.concatenate([[0.0], np.cumsum(np.log((n - k + 1) / k) + np.log(c) - np.log1p(-c))])
    cdf = np.cumsum(np.exp(log_pmf))
    lo = int(np.argmax(cdf >= lo_q)) if np.any(cdf >= lo_q) else n
    hi = int(np.argmax(cdf >= hi_q)) if np.any(cdf >= hi_q) else n
    return lo / n, hi / n


def reliability_diagram(labels, probs=None, *, logits=None, bins=15, level=0.95, plot=True, ax=None, title=None):
    """The top-label reliability diagram of predictions, with counts and the consistency band.

    labels : [N] true classes; probs : [N, K] probabilities (or [N]: a binary problem's positive
    class), or logits= [N, K] ([N]: a binary logit). numpy arrays or torch tensors of any dtype/device.
    bins : equal-width confidence bins (15, as arcal.metrics). level : the band's coverage (0.95).
    plot : draw the figure when matplotlib is installed (True); False returns the data only.
    ax : a matplotlib Axes to draw into (a new figure otherwise). title : the axes' title.

    Returns a dict: edges [B+1], n [B], confidence [B] and accuracy [B] (NaN in empty bins: the values
    arcal.metrics reports in "reliability"), band_low/band_high [B] (the accuracies a calibrated model
    would show in each bin, `level` coverage: Binomial(n, c) / n quantiles, NaN in empty bins), ece
    (arcal.metrics' value), and figure/axes (None when nothing was drawn; "plotted" says whether, and
    "why_not" why not).
    """
    y, z, p = prediction_arrays(labels, logits, probs, "reliability_diagram")
    if (z is None) == (p is None):
        raise ValueError("reliability_diagram: give exactly one of probs and logits")
    if not 1 <= int(bins) <= 100000:
        raise ValueError(f"reliability_diagram: bins is {bins}, but must be in [1, 100000]")
    if not 0 < level < 1:
        raise ValueError(f"reliability_diagram: level is {level}, but must be in (0, 1)")
    m = _arcal.metrics(y, logits=z, probs=p, bins=int(bins), ci=False)  # validates every input
    rel = m["reliability"]
    n = np.array([r["n"] for r in rel], dtype=np.int64)
    confidence = np.array([np.nan if r["confidence"] is None else r["confidence"] for r in rel])
    accuracy = np.array([np.nan if r["accuracy"] is None else r["accuracy"] for r in rel])
    B = int(bins)
    low, high = np.full(B, np.nan), np.full(B, np.nan)
    for k in np.flatnonzero(n > 0):
        low[k], high[k] = _binomial_band(int(n[k]), float(confidence[k]), level)
    out = {"edges": np.arange(B + 1) / B, "n": n, "confidence": confidence, "accuracy": accuracy,
           "band_low": low, "band_high": high, "level": level, "ece": m["ece"],
           "figure": None, "axes": None, "plotted": False, "why_not": "plot=False"}
    if not plot:
        return out
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        out["why_not"] = "matplotlib is not installed (Debian: apt-get install python3-matplotlib)"
        return out
    if ax is None:
        fig, ax = plt.subplots(figsize=(4.8, 4.8))
    else:
        fig = ax.figure
    mid = (out["edges"][:-1] + out["edges"][1:]) / 2
    width = 1.0 / B
    ok = n > 0
    ax.fill_between(np.repeat(out["edges"], 2)[1:-1], np.repeat(np.where(ok, low, np.nan), 2),
                    np.repeat(np.where(ok, high, np.nan), 2), color="0.85", step=None,
                    label=f"consistency band ({level:.0%})")
    ax.bar(mid[ok], accuracy[ok], width=width * 0.9, color="#3b75af", edgecolor="#2a5580", label="accuracy")
    ax.plot([0, 1], [0, 1], "k--", lw=1, label="calibrated")
    for k in np.flatnonzero(ok):
        ax.text(mid[k], min(accuracy[k] + 0.02, 0.97), str(int(n[k])), ha="center", va="bottom", fontsize=6)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("confidence")
    ax.set_ylabel("accuracy")
    ax.set_title(title or f"ECE {m['ece']:.4f} (n = {m['n']}, {B} bins)")
    ax.legend(loc="upper left", fontsize=7)
    out.update(figure=fig, axes=ax, plotted=True, why_not="")
    return out
