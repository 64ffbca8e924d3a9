#!/usr/bin/env python3
"""Where one training step of `arcal train` spends its time.

Runs `arcal train` for 80 optimizer steps with ARCAL_PROFILE set (LibTorch's profiler records steps
20-69 as a chrome trace, src/train/trainer.cpp), then aggregates the trace per operator: self time
(an operator's time minus the operators it called), calls, and the share of the profiled wall time.
Also groups operators into GEMM, AttnRes routing, attention softmax, normalisation, elementwise, the
optimizer and the rest, so the profile answers "what would a faster step have to fix".

Usage: profile_train.py [--arcal build/arcal] [--residual full] [--precision fp32] [--batch 128]
                        [--threads 1] [--top 25]
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile

GROUPS = [
    ("GEMM (matmul, linear, bmm and their backward)", ("mm", "addmm", "bmm", "matmul", "linear", "baddbmm")),
    ("softmax / log-softmax", ("softmax", "_softmax", "log_softmax", "_log_softmax")),
    ("normalisation (layer norm, RMS)", ("layer_norm", "native_layer_norm", "rsqrt", "norm", "pow", "mean")),
    ("optimizer (AdamW)", ("addcmul_", "addcdiv_", "lerp_", "sqrt", "_foreach")),
    ("copies and layout (copy_, cat, stack, index, contiguous)", ("copy_", "cat", "stack", "index_select", "contiguous",
                                                                  "index", "clone", "to", "_to_copy", "empty", "zeros",
                                                                  "fill_", "zero_", "narrow", "select", "slice")),
    ("elementwise (add, mul, div, gelu, ...)", ("add", "add_", "mul", "mul_", "div", "div_", "gelu", "sub", "exp",
                                                 "neg", "where", "sum", "clamp", "sigmoid", "tanh")),
]


def group_of(name):
    base = name.split("::")[-1]
    if base.endswith("Backward0") or base.endswith("Backward1") or "Backward" in base:
        for g, ops in GROUPS:
            if any(base.lower().startswith(o.replace("_", "")) for o in ops):
                return g + " [backward]"
        return "autograd backward nodes (other)"
    for g, ops in GROUPS:
        if base in ops:
            return g
    return "other"


def self_times(events):
    """Self time per event: its duration minus the durations of events nested directly in it."""
    by_tid = collections.defaultdict(list)
    for e in events:
        by_tid[e.get("tid", 0)].append(e)
    out = []
    for evs in by_tid.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in evs:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                out.append(stack.pop())
            if stack:
                stack[-1]["_child"] = stack[-1].get("_child", 0.0) + e["dur"]
            stack.append(e)
        out.extend(stack)
    return [(e["name"], e["dur"] - e.get("_child", 0.0)) for e in out]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arcal", default=os.path.join(os.path.dirname(__file__), "..", "build", "arcal"))
    ap.add_argument("--residual", default="full")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        trace = os.path.join(d, "trace.json")
        env = dict(os.environ, ARCAL_PROFILE=trace)
        cmd = [a.arcal, "train", "--residual", a.residual, "--precision", a.precision, "--batch-size", str(a.batch),
               "--threads", str(a.threads), "--max-steps", "80", "--train-subset", str(80 * a.batch), "--quiet",
               "--out", os.path.join(d, "run")]
        subprocess.run(cmd, env=env, check=True)
        events = [e for e in json.load(open(trace)) if e.get("ph") == "X" and "dur" in e]
    if not events:
        sys.exit("the trace holds no operator events")
    wall = max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events)
    per_op = collections.defaultdict(lambda: [0.0, 0])
    per_group = collections.defaultdict(float)
    for name, t in self_times(events):
        per_op[name][0] += t
        per_op[name][1] += 1
        per_group[group_of(name)] += t
    total = sum(v[0] for v in per_op.values())
    print(f"arcal train, {a.residual}, {a.precision}, batch {a.batch}, {a.threads} thread(s): 50 profiled steps, "
          f"{wall / 1e6:.2f} s wall ({wall / 50 / 1e3:.1f} ms per step), {total / 1e6:.2f} s in operators")
    print("\nby group (self time):")
    for g, t in sorted(per_group.items(), key=lambda x: -x[1]):
        print(f"  {100 * t / total:5.1f} %  {t / 50 / 1e3:7.2f} ms/step  {g}")
    print(f"\ntop {a.top} operators (self time):")
    for name, (t, n) in sorted(per_op.items(), key=lambda x: -x[1][0])[: a.top]:
        print(f"  {100 * t / total:5.1f} %  {t / 50 / 1e3:7.2f} ms/step  {n / 50:6.1f} calls/step  {name}")


if __name__ == "__main__":
    main()
