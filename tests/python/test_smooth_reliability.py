"""The smooth reliability diagram and smECE's interval (issue 56) against relplot 1.0.3 itself (pinned in
pyproject.toml's test list): arcal's curve and density equal relplot's KernelSmoother and
ReflectedGaussianKernel.kde at the same bandwidth, its sigma and smECE equal relplot's smECE_fast, and its
bootstrap band and smECE interval have the width relplot's own bootstraps give (random there, so a loose
bound)."""
import numpy as np
import pytest

import arcal

relplot = pytest.importorskip("relplot")
from relplot.estimators import KernelSmoother  # noqa: E402
from relplot.kernels import ReflectedGaussianKernel  # noqa: E402
from relplot.metrics import smECE_fast  # noqa: E402


def binary_predictions(n, seed, power=1.4):
    rng = np.random.default_rng(seed)
    p = rng.beta(4.0, 1.5, n)  # confidence-like: most mass near 1
    y = (rng.random(n) < p ** power).astype(np.int64)  # over-confident
    probs = np.stack([1 - p, p], axis=1)
    return probs, y


def top_label(probs, y):
    pred = probs.argmax(axis=1)
    return probs.max(axis=1), (pred == y).astype(np.float64)


@pytest.mark.parametrize("n,seed", [(3000, 1), (20000, 2)])
def test_curve_density_and_sigma_equal_relplot(n, seed):
    probs, y = binary_predictions(n, seed)
    m = arcal.metrics(y, probs=probs, smooth=True, bootstrap=200, seed=3)
    sm = m["smooth_reliability"]
    f, a = top_label(probs, y)
    t = np.asarray(sm["t"])
    assert len(t) == 200 and t[0] == 0 and t[-1] == 1
    ce, sigma = smECE_fast(f, a, eps=0.001, return_width=True)
    assert sm["sigma"] == pytest.approx(sigma, rel=1e-12)
    # smECE itself: arcal's is the folded-kernel definition on relplot's 200-point grid (method.md §4);
    # the PyPI release computes it from its kernel smoother on a max(200, 10 / sigma) mesh, which differs
    # by grid rounding only (0.08 % here).
    assert m["smece"] == pytest.approx(ce, rel=5e-3)
    ref = KernelSmoother(ReflectedGaussianKernel(sm["sigma"])).fit(f.reshape(-1, 1), a).predict(t.reshape(-1, 1))
    np.testing.assert_allclose(sm["accuracy"], ref, rtol=1e-9, atol=1e-12)
    dens = ReflectedGaussianKernel(sm["sigma"]).kde(f, t)
    np.testing.assert_allclose(sm["density"], dens, rtol=1e-9, atol=1e-12)


def test_band_and_smece_interval_have_relplots_width():
    probs, y = binary_predictions(4000, 7)
    m = arcal.metrics(y, probs=probs, smooth=True, bootstrap=1000, seed=11)
    sm = m["smooth_reliability"]
    low, high, acc = map(np.asarray, (sm["low"], sm["high"], sm["accuracy"]))
    assert sm["draws"] == 200 and len(low) == len(high) == 200
    assert np.all(low <= high)
    f, a = top_label(probs, y)
    np.random.seed(5)  # relplot's bagging and scipy's bootstrap draw from numpy's global generator
    rd = relplot.prepare_rel_diagram(f, a, num_bootstrap=200)
    # Where the confidences are (density above a tenth of its peak), the two bands have the same width
    # within a factor of 2 and relplot's curve lies inside arcal's band.
    dens = np.asarray(sm["density"])
    where = dens > 0.1 * dens.max()
    ours, theirs = (high - low)[where], (rd["upper"] - rd["lower"])[where]
    ratio = np.median(ours / theirs)
    assert 0.5 < ratio < 2.0, ratio
    inside = np.mean((rd["mu"][where] >= low[where] - 1e-9) & (rd["mu"][where] <= high[where] + 1e-9))
    assert inside > 0.9, inside
    # smECE: relplot's basic bootstrap (2 smECE - the percentiles), as wide as relplot's (within 2x). It
    # corrects the upward bias, so the plug-in value may lie above the interval, never below it.
    lo, hi = m["ci"]["smece"]
    assert 0 <= lo < hi and lo <= m["smece"]
    half = (hi - lo) / 2
    assert 0.5 < half / rd["ce_ci_width"] < 2.0, (half, rd["ce_ci_width"])
    # The curve inside its band nearly everywhere the data are.
    assert np.mean((acc[where] >= low[where]) & (acc[where] <= high[where])) > 0.9


def test_smooth_is_off_by_default_and_without_bootstrap_has_no_band():
    probs, y = binary_predictions(500, 3)
    assert "smooth_reliability" not in arcal.metrics(y, probs=probs, ci=False)
    m = arcal.metrics(y, probs=probs, ci=False, smooth=True)
    assert m["smooth_reliability"]["low"] == [] and m["smooth_reliability"]["draws"] == 0
    assert m["ci"]["smece"] is None
