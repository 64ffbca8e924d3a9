#!/usr/bin/env python3
"""Checks that every #include between src/ folders points down the layer order (issue 57).

Each top-level folder of src/ is a layer; a file may include its own folder and any folder of a lower
layer, never one of its own layer or above (an arrow up). The order, lowest first:

    core
    ops, io, stats          (plain arrays, files, statistics)
    data, calib             (datasets; calibration metrics and calibrators)
    audit                   (the audit's computations)
    results                 (typed results, their JSON and files)
    report, model           (the report; the LibTorch models)
    train                   (training)
    cedar, run              (CEDAR's studies; `arcal run`)

    scripts/layering.py [--root DIR]

Exit status 1 listing every include that points up or sideways (file, line, include), or a folder of
src/ that is not in the order; 0 otherwise.
"""
import argparse
import os
import re
import sys

LAYERS = [["core"], ["ops", "io", "stats"], ["data", "calib"], ["audit"], ["results"], ["report", "model"],
          ["train"], ["cedar", "run"]]
RANK = {folder: rank for rank, folders in enumerate(LAYERS) for folder in folders}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    a = ap.parse_args()
    src = os.path.join(a.root, "src")
    problems, edges = [], 0
    for folder in sorted(os.listdir(src)):
        if os.path.isdir(os.path.join(src, folder)) and folder not in RANK:
            problems.append(f"src/{folder}: a folder the layer order does not name (scripts/layering.py LAYERS)")
    for dirpath, _, files in os.walk(src):
        for name in sorted(files):
            if not name.endswith((".hpp", ".cpp", ".h", ".cu", ".cuh")):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, a.root)
            here = rel.split(os.sep)[1]
            with open(path, encoding="utf-8") as f:
                for line_no, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m or m.group(1) == here or m.group(1) not in RANK or here not in RANK:
                        continue
                    edges += 1
                    if RANK[m.group(1)] >= RANK[here]:
                        kind = "up" if RANK[m.group(1)] > RANK[here] else "sideways"
                        problems.append(f"{rel}:{line_no}: includes {m.group(1)}/ ({kind}: {here} is layer "
                                        f"{RANK[here]}, {m.group(1)} layer {RANK[m.group(1)]})")
    for p in problems:
        print(p)
    print(f"layering: {edges} includes between folders, {len(problems)} pointing up or sideways")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
