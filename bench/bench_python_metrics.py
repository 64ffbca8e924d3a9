"""arcal.metrics (the Python module) against the CLI's in-process time and the NumPy reference, on the
synthetic N x K file of bench_metrics (bench/README.md).

usage: PYTHONPATH=build/python /usr/bin/python3 bench/bench_python_metrics.py [--n 1000000] [--k 100]
           [--bins 15] [--repeats 3] [--build build] [--no-numpy]

Runs build/bench/bench_metrics N K BINS REPEATS (configure with -DARCAL_BUILD_BENCH=ON): it writes the
seeded file with reference/metrics_numpy.py, times the NumPy reference and `arcal::calibration_report`
called in process exactly as `arcal metrics` calls it (best of REPEATS, no bootstrap). Then times
arcal.metrics(labels, probs=p, ci=False) on the same arrays loaded with np.load (float64 and int64: the
module reads them in place), best of REPEATS, checks every value against the NumPy reference to 1e-9
relative and prints module / CLI in-process (goal: <= 1.2) and NumPy / module. Without a bench_metrics
binary (--build) it times the NumPy reference itself (--no-numpy skips it) and prints no CLI ratio.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "reference"))
import metrics_numpy  # noqa: E402

import arcal  # noqa: E402

KEYS = ["accuracy", "ece", "mce", "rmsce", "ada_ece", "classwise_ece", "debiased_ece", "smece", "smece_sigma", "nll",
        "brier", "auroc"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000000)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--bins", type=int, default=15)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--no-numpy", action="store_true")
    a = ap.parse_args()
    data = f"/tmp/arcal_bench_{a.n}_{a.k}.npz"
    ref_json = f"/tmp/arcal_bench_{a.n}_{a.k}.json"
    exe = os.path.join(a.build, "bench", "bench_metrics")
    cli_s = numpy_s = None
    if os.path.exists(exe):
        out = subprocess.run([exe, str(a.n), str(a.k), str(a.bins), str(a.repeats)], check=True, capture_output=True,
                             text=True).stdout
        print(out, end="")
        m = re.search(r"time: arcal ([0-9.]+) s, numpy ([0-9.]+) s", out)
        cli_s, numpy_s = float(m.group(1)), float(m.group(2))
        ref = json.load(open(ref_json))["values"]
    else:
        print(f"({exe} not built: no CLI in-process time; configure with -DARCAL_BUILD_BENCH=ON)")
        metrics_numpy.make(data, a.n, a.k, 7)
        ref = None
    with np.load(data) as f:
        p, y = f["probs"], f["labels"]
    if ref is None and not a.no_numpy:
        t0 = time.perf_counter()
        ref = {k: float(v) for k, v in metrics_numpy.metrics(p, y, a.bins).items()}
        numpy_s = time.perf_counter() - t0
    times = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        res = arcal.metrics(y, probs=p, bins=a.bins, ci=False)
        times.append(time.perf_counter() - t0)
    best = min(times)
    print(f"bench_python_metrics: N = {a.n}, K = {a.k}, bins = {a.bins}, best of {a.repeats}")
    ok = True
    if ref is not None:
        for k in KEYS:
            rel = abs(res[k] - ref[k]) / max(abs(ref[k]), 1e-300)
            ok &= rel <= 1e-9
            if rel > 1e-9:
                print(f"  {k}: module {res[k]!r} vs numpy {ref[k]!r} (rel {rel:.2e}) MISMATCH")
        print("  values agree with NumPy to 1e-9 relative" if ok else "  VALUES DISAGREE")
    print(f"  arcal.metrics {best:.3f} s (runs: {', '.join(f'{t:.3f}' for t in times)})")
    if cli_s is not None:
        print(f"  CLI in-process (calibration_report) {cli_s:.3f} s: module / CLI = {best / cli_s:.2f}x (goal <= 1.2)")
    if numpy_s is not None:
        print(f"  NumPy reference {numpy_s:.3f} s: NumPy / module = {numpy_s / best:.1f}x")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
