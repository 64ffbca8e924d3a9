#!/usr/bin/env python3
"""The audit's time and memory against N (issue 26): for each N, three simulated runs (arcal simulate,
K classes, seeds 0-2, no effect), the default `arcal audit` on all three (diagnostic with R = 10,000,
AR-CondCal, probes; no sensitivity or exact null), its wall time, peak resident memory (of the audit
process alone, from wait4) and the stage times results.json records (seconds.diagnostic,
seconds.condcal, probes.seconds). Also, with --wide, K = 1000 at N = 50,000: `arcal metrics` and the
diagnostic alone (--no-condcal --no-probes); with --refits N..., the exact null and the sensitivity audit
on three runs of each N (their refits on the default --refit-subsample, the exact null sequential, then
with --no-null-sequential; no AR-CondCal): wall, peak RSS, each audit's seconds and the replicates the
decision null drew (with --fixed also the exact null with --no-null-sequential). Prints Markdown tables (docs/results.md keeps them).

usage: scripts/audit_scaling.py --arcal build/arcal [--n 1000 10000 100000] [--classes 10] [--wide]
                                [--refits 100000] [--fixed] [--work DIR]
"""
import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time


def run_measured(argv):
    """wall seconds and peak RSS [MiB] of one process (wait4 gives its own rusage)."""
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.execv(argv[0], argv)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit("audit_scaling: %s failed (exit %d)" % (" ".join(argv), os.waitstatus_to_exitcode(status)))
    return wall, usage.ru_maxrss / 1024.0


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arcal", required=True)
    ap.add_argument("--n", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--wide", action="store_true", help="also K = 1000 at N = 50,000 (metrics, diagnostic)")
    ap.add_argument("--refits", type=int, nargs="*", default=[],
                    help="N for the exact-null and sensitivity timing (three runs each)")
    ap.add_argument("--fixed", action="store_true", help="with --refits, also the exact null with all replicates")
    ap.add_argument("--work", default=None)
    a = ap.parse_args()
    arcal = os.path.abspath(a.arcal)
    work = a.work or tempfile.mkdtemp(prefix="arcal_scaling_")
    os.makedirs(work, exist_ok=True)
    rows = []

    def simulated(n):
        traces = []
        for s in range(3):
            t = os.path.join(work, "n%d_s%d.npz" % (n, s))
            if not os.path.exists(t):
                subprocess.run([arcal, "simulate", "--out", t, "--n", str(n), "--classes", str(a.classes), "--seed",
                                str(s), "--force"], check=True, capture_output=True)
            traces.append(t)
        return traces

    for n in a.n:
        traces = simulated(n)
        out = os.path.join(work, "audit_n%d" % n)
        wall, rss = run_measured([arcal, "audit"] + traces + ["--out", out, "--force"])
        res = json.load(open(os.path.join(out, "results.json")))
        sec = res.get("seconds", {})
        rows.append((n, a.classes, "default audit, 3 runs", wall, rss, sec.get("diagnostic"), sec.get("condcal"),
                     res.get("probes", {}).get("seconds"), res["verdict"]["answer"]))
        print("N = %d: %.1f s, %.0f MiB" % (n, wall, rss), file=sys.stderr)
    if a.wide:
        n, k = 50000, 1000
        t = os.path.join(work, "wide.npz")
        subprocess.run([arcal, "simulate", "--out", t, "--n", str(n), "--classes", str(k), "--force"], check=True,
                       capture_output=True)
        wall, rss = run_measured([arcal, "metrics", t, "--json"])
        rows.append((n, k, "arcal metrics (1,000 bootstrap draws)", wall, rss, None, None, None, "-"))
        out = os.path.join(work, "audit_wide")
        wall, rss = run_measured([arcal, "audit", t, "--out", out, "--force", "--no-condcal", "--no-probes"])
        res = json.load(open(os.path.join(out, "results.json")))
        rows.append((n, k, "diagnostic only, 1 run", wall, rss, res.get("seconds", {}).get("diagnostic"), None, None,
                     res["verdict"]["answer"]))
    f = lambda v: "-" if v is None else "%.1f" % v
    refit_rows = []
    for n in a.refits:
        traces = simulated(n)
        for seq in (True, False) if a.fixed else (True,):
            out = os.path.join(work, "refits_n%d_%s" % (n, "seq" if seq else "fixed"))
            argv = [arcal, "audit"] + traces + ["--out", out, "--force", "--no-condcal", "--no-probes", "--exact-null",
                                                "--no-null-model-based", "--null-sequential" if seq else "--no-null-sequential"]
            if seq:
                argv.append("--sensitivity")
            wall, rss = run_measured(argv)
            res = json.load(open(os.path.join(out, "results.json")))
            x = res["exact_null"]
            drawn = sorted({p["replicates"] for p in x["pooled"]})
            refit_rows.append((n, "sensitivity + exact null (sequential)" if seq else "exact null (all replicates)",
                               wall, rss, res["sensitivity"]["seconds"] if seq else None, x["seconds"],
                               "/".join(str(d) for d in drawn), x["refit"]["examples"][0],
                               " / ".join("%s %.3f" % (p["variant"], p["p"]) for p in x["pooled"]
                                          if p["comparison"] == "full_vector_vs_capacity_matched")))
            print("refits N = %d (%s): %.1f s, %.0f MiB" % (n, "seq" if seq else "fixed", wall, rss), file=sys.stderr)
    print("| N | K | what | wall [s] | peak RSS [MiB] | diagnostic [s] | AR-CondCal [s] | probes [s] | verdict |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %d | %s | %.1f | %.0f | %s | %s | %s | %s |" % ("{:,}".format(r[0]), r[1], r[2], r[3], r[4], f(r[5]),
                                                                  f(r[6]), f(r[7]), r[8]))
    if refit_rows:
        print("\n| N | what | wall [s] | peak RSS [MiB] | sensitivity [s] | exact null [s] | replicates drawn | "
              "examples refitted per run | pooled p (full_vector_vs_capacity_matched) |")
        print("|---|---|---|---|---|---|---|---|---|")
        for r in refit_rows:
            print("| %s | %s | %.1f | %.0f | %s | %.1f | %s | %s | %s |" % ("{:,}".format(r[0]), r[1], r[2], r[3], f(r[4]),
                                                                        r[5], r[6], "{:,}".format(r[7]), r[8]))
    print("\n(%s, %d cores, %s; %s)" % (cpu_name(), os.cpu_count(),
                                        time.strftime("%Y-%m-%d"), "arcal " + subprocess.run(
                                            [arcal, "--version"], capture_output=True, text=True).stdout.strip()))
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
