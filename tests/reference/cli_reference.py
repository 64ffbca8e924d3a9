"""NumPy side of the CLI tests (tests/cli): writes trace files with numpy and checks arcal's outputs
with numpy alone. Metric values come from bench/reference/metrics_numpy.py (method.md §4 written
in NumPy), applied to softmax(logits) computed here.

usage: cli_reference.py make FILE N K SEED TEMP   -> logits (float32) [N, K] and labels (int64) [N];
                                                     labels ~ softmax(logits / TEMP), TEMP > 1: overconfident
       cli_reference.py bad FILE KIND             -> a small trace broken in one way: nan_logits
                                                     (logits[3, 1] = NaN) or label_range (labels[5] = K)
       cli_reference.py metrics FILE BINS          -> JSON of the metrics of FILE's softmax(logits)
       cli_reference.py inspect FILE               -> JSON: arrays, dtypes, shapes, row-sum error, ECE
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "reference"))
import metrics_numpy  # noqa: E402


def softmax(z):
    z = z.astype(np.float64)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e * (1.0 / e.sum(axis=1, keepdims=True))


def make(path, n, k, seed, temp):
    rng = np.random.default_rng(seed)
    z = (rng.normal(size=(n, k)) * 3.0).astype(np.float32)
    q = softmax(z / temp)
    u = rng.random(n)[:, None]
    y = (q.cumsum(axis=1) < u).sum(axis=1).clip(0, k - 1)
    np.savez(path, logits=z, labels=y.astype(np.int64))


def bad(path, kind):
    z = np.random.default_rng(1).normal(size=(20, 4)).astype(np.float32)
    y = np.arange(20, dtype=np.int64) % 4
    if kind == "nan_logits":
        z[3, 1] = np.nan
    elif kind == "label_range":
        y[5] = 4
    else:
        raise SystemExit("unknown kind " + kind)
    np.savez(path, logits=z, labels=y)


def inspect(path):
    with np.load(path) as f:
        arrays = {name: {"dtype": str(f[name].dtype), "shape": list(f[name].shape)} for name in f.files}
        p, y = f["probs"], f["labels"]
        calibrator = json.loads(str(f["calibrator"][0]))
    n = len(y)
    pred = p.argmax(axis=1)
    c = p[np.arange(n), pred]
    a = (pred == y).astype(float)
    ece = metrics_numpy.binned(c, a, metrics_numpy.width_bins(c, 15), 15)[0]
    print(json.dumps({"arrays": arrays, "rowsum_err": float(np.abs(p.sum(axis=1) - 1).max()),
                      "min": float(p.min()), "max": float(p.max()), "ece": float(ece),
                      "method": calibrator["method"]}))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "make":
        make(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]))
    elif cmd == "bad":
        bad(sys.argv[2], sys.argv[3])
    elif cmd == "metrics":
        with np.load(sys.argv[2]) as f:
            p, y = softmax(f["logits"]), f["labels"]
        m = metrics_numpy.metrics(p, y, int(sys.argv[3]))
        print(json.dumps({k: float(v) for k, v in m.items()}))
    elif cmd == "inspect":
        inspect(sys.argv[2])
