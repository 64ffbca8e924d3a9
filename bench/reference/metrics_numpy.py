"""NumPy implementation of arcal's calibration metrics (docs/method.md §4 conventions), written for
bench_metrics: same bin edges (interior edges to the upper bin, c = 1 in the last bin), equal-mass
groups with tied runs kept in the group of their first rank, AUROC with average ranks, relplot smECE.

usage: metrics_numpy.py make FILE N K SEED   -> writes a synthetic probs/labels .npz
       metrics_numpy.py run FILE BINS OUT    -> computes the metrics, writes OUT (JSON: values, seconds)
"""
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "reference"))
import smece_relplot  # noqa: E402


def make(path, n, k, seed):
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, k)) * 2.5
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    # labels from softmax(z / 1.6): the probabilities are overconfident
    q = np.exp(z / 1.6)
    q /= q.sum(axis=1, keepdims=True)
    u = rng.random(n)[:, None]
    y = (q.cumsum(axis=1) < u).sum(axis=1).clip(0, k - 1)
    np.savez(path, probs=p, labels=y.astype(np.int64))


def width_bins(c, b):
    idx = np.minimum((c * b).astype(np.int64), b - 1)
    up = (idx + 1 < b) & (c >= (idx + 1) / b)
    idx = idx + up
    down = (idx > 0) & (c < idx / b)
    return idx - down


def binned(c, a, idx, b):
    n = np.bincount(idx, minlength=b).astype(float)
    sc = np.bincount(idx, weights=c, minlength=b)
    sa = np.bincount(idx, weights=a, minlength=b)
    m = n > 0
    gap = sa[m] / n[m] - sc[m] / n[m]
    w = n[m] / len(c)
    acc = sa[m] / n[m]
    ok = n[m] >= 2
    deb = np.sum((w * (gap ** 2 - acc * (1 - acc) / np.where(ok, n[m] - 1, 1)))[ok])
    return np.sum(w * np.abs(gap)), np.max(np.abs(gap)), np.sqrt(np.sum(w * gap ** 2)), deb


def mass_bins(c, b):
    order = np.argsort(c, kind="stable")
    cs = c[order]
    n = len(c)
    q, rem = divmod(n, b)
    r = np.arange(n)
    start = np.r_[True, cs[1:] != cs[:-1]]
    run_first = np.maximum.accumulate(np.where(start, r, 0))
    g = np.where(run_first < rem * (q + 1), run_first // (q + 1), rem + (run_first - rem * (q + 1)) // max(q, 1))
    out = np.empty(n, dtype=np.int64)
    out[order] = g
    return out


def auroc(c, a):
    order = np.argsort(c, kind="stable")
    cs, as_ = c[order], a[order]
    start = np.r_[True, cs[1:] != cs[:-1]]
    run = np.cumsum(start) - 1
    first = np.flatnonzero(start)
    size = np.diff(np.r_[first, len(cs)])
    avg = first[run] + (size[run] + 1) / 2.0
    pos = as_.sum()
    neg = len(as_) - pos
    return (np.sum(avg[as_ == 1]) - pos * (pos + 1) / 2) / (pos * neg)


def metrics(p, y, b):
    n, k = p.shape
    pred = p.argmax(axis=1)
    c = p[np.arange(n), pred]
    a = (pred == y).astype(float)
    ece, mce, rms, deb = binned(c, a, width_bins(c, b), b)
    ada = binned(c, a, mass_bins(c, b), b)[0]
    onehot = np.zeros_like(p)
    onehot[np.arange(n), y] = 1
    cw = np.mean([binned(p[:, j], onehot[:, j], width_bins(p[:, j], b), b)[0] for j in range(k)])
    sm, sig = smece_relplot.smece(c, a)
    return {
        "accuracy": a.mean(), "ece": ece, "mce": mce, "rmsce": rms, "ada_ece": ada, "classwise_ece": cw,
        "debiased_ece": np.sqrt(max(deb, 0.0)), "smece": sm, "smece_sigma": sig,
        "nll": -np.mean(np.log(np.maximum(p[np.arange(n), y], 1e-15))),
        "brier": np.mean(np.sum((p - onehot) ** 2, axis=1)), "auroc": auroc(c, a),
    }


def run(path, bins, out):
    with np.load(path) as z:
        p, y = z["probs"], z["labels"]
    t0 = time.perf_counter()
    m = metrics(p, y, int(bins))
    dt = time.perf_counter() - t0
    with open(out, "w") as f:
        json.dump({"values": {k: float(v) for k, v in m.items()}, "seconds": dt}, f)


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        run(sys.argv[2], sys.argv[3], sys.argv[4])
