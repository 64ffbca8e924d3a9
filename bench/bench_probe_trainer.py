#!/usr/bin/env python3
"""The audit's MLP probes on arcal's own trainer (audit/mlp_probe.cpp: OpenBLAS, no LibTorch) against the
LibTorch trainer it replaced (bench/reference/mlp_probe_libtorch.cpp, linked into
build-bench/bench/arcal_libtorch_probes), in one run: both audit the same traces (probes on, no
sensitivity or exact null, 100 permutations for the diagnostic) at several seeds, alternating, and the
script prints each comparison's log-loss gain per run with both trainers (mean and seed-to-seed sd over
the seeds) and the probes' wall time (results.json probes.seconds).

The trainers agree when, for every run and comparison, the difference of the two means is within the
seed-to-seed spread (|mean_new - mean_old| <= 2 * sqrt(sd_new^2/S + sd_old^2/S) + 1e-4 nats).

Usage: bench_probe_trainer.py TRACE.npz [TRACE.npz ...] [--new build/arcal]
                              [--old build-bench/bench/arcal_libtorch_probes] [--seeds 5] [--threads 2]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def audit(binary, traces, seed, threads, out):
    t0 = time.perf_counter()
    subprocess.run([binary, "audit", *traces, "--out", out, "--seed", str(seed), "--permutations", "100",
                    "--threads", str(threads), "--no-condcal", "--quiet"], check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    with open(os.path.join(out, "results.json")) as f:
        res = json.load(f)
    gains = {}
    for r in res["probes"]["runs"]:
        for c in r["comparisons"]:
            gains[(r["run"], c["name"])] = c["log_loss"]["gain"]
    return gains, res["probes"]["seconds"], wall


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--new", default=os.path.join(HERE, "..", "build", "arcal"))
    ap.add_argument("--old", default=os.path.join(HERE, "..", "build-bench", "bench", "arcal_libtorch_probes"))
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="write the per-seed gains and times here")
    a = ap.parse_args()
    got = {"new": [], "old": []}
    with tempfile.TemporaryDirectory() as d:
        for s in range(a.seeds):
            for side, binary in (("new", a.new), ("old", a.old)):
                g, sec, wall = audit(binary, a.traces, s, a.threads, os.path.join(d, f"{side}-{s}"))
                got[side].append({"gains": g, "probe_seconds": sec, "wall": wall})
                print(f"seed {s} {side}: probes {sec:.1f} s (audit {wall:.1f} s)", file=sys.stderr, flush=True)
    keys = sorted(got["new"][0]["gains"])
    S = a.seeds
    print(f"| run | comparison | BLAS trainer gain (mean ± sd, {S} seeds) | LibTorch trainer gain | |difference| | "
          f"allowed (2 SE + 1e-4) |")
    print("|---|---|---|---|---|---|")
    agree = 0
    for k in keys:
        n = [x["gains"][k] for x in got["new"]]
        o = [x["gains"][k] for x in got["old"]]
        mn, mo = statistics.mean(n), statistics.mean(o)
        sn, so = (statistics.stdev(n), statistics.stdev(o)) if S > 1 else (0.0, 0.0)
        allowed = 2 * ((sn ** 2 + so ** 2) / S) ** 0.5 + 1e-4
        ok = abs(mn - mo) <= allowed
        agree += ok
        print(f"| {k[0]} | {k[1]} | {mn:+.5f} ± {sn:.5f} | {mo:+.5f} ± {so:.5f} | {abs(mn - mo):.5f} | "
              f"{allowed:.5f}{'' if ok else ' **outside**'} |")
    tn = statistics.median(x["probe_seconds"] for x in got["new"])
    to = statistics.median(x["probe_seconds"] for x in got["old"])
    print(f"\n{agree} of {len(keys)} (run, comparison) gains agree within the seed-to-seed spread; probes' time, "
          f"median over {S} seeds: BLAS {tn:.1f} s, LibTorch {to:.1f} s, ratio {tn / to:.3f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({k: [{"gains": {f"{r}|{c}": v for (r, c), v in x["gains"].items()}, "probe_seconds": x["probe_seconds"],
                            "wall": x["wall"]} for x in v] for k, v in got.items()}, f, indent=1)


if __name__ == "__main__":
    main()
