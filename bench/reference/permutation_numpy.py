"""Vectorised NumPy reference for arcal's within-bin permutation test (method.md §6.1).

Reads the strata written by bench_permutation (one test = a list of confidence-bin strata; each
stratum's residuals are ordered top tertile, bottom tertile, middle), runs the same test with R
permutations per test, and prints JSON {"seconds": wall, "cpu_seconds": cpu, "p": [...], "gap": [...]}.
Vectorisation: for each stratum, R independent shuffles at once with Generator.permuted along
axis 1 (in chunks of rows to bound memory), then the group sums are row sums of column slices.

usage: permutation_numpy.py STRATA.json R SEED
"""
import json
import sys
import time

import numpy as np


def permutation_test(strata, R, rng, chunk=2000):
    gap = 0.0
    null = np.zeros(R)
    for s in strata:
        v = np.asarray(s["values"], dtype=np.float64)
        nt, nb, w = s["n_top"], s["n_bottom"], s["weight"]
        gap += w * (v[:nt].mean() - v[nt:nt + nb].mean())
        for start in range(0, R, chunk):
            rows = min(chunk, R - start)
            perm = rng.permuted(np.broadcast_to(v, (rows, v.size)), axis=1)
            top = perm[:, :nt].sum(axis=1) / nt
            bottom = perm[:, nt:nt + nb].sum(axis=1) / nb
            null[start:start + rows] += w * (top - bottom)
    thr = abs(gap) - 1e-9 * (1.0 + abs(gap))
    p = (1.0 + np.count_nonzero(np.abs(null) >= thr)) / (R + 1.0)
    return gap, p


def main():
    path, R, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    with open(path) as f:
        tests = json.load(f)
    rng = np.random.default_rng(seed)
    t0, c0 = time.perf_counter(), time.process_time()
    out = [permutation_test(t, R, rng) for t in tests]
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu, "gap": [g for g, _ in out], "p": [p for _, p in out],
                      "numpy": np.__version__}))


if __name__ == "__main__":
    main()
