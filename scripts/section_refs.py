#!/usr/bin/env python3
"""Resolves every pointer into docs/method.md from the code (issue 57).

A pointer is `method.md §N` (N = 6, 6.3, 8.1, ...; `shared/method.md §N` points into the seed spec and is
skipped) in src/, apps/, python/, bench/, scripts/ and tests/. Its section must exist in docs/method.md
(a `## N.` or `### N.` heading, or a paragraph that opens with `**N `). A pointer that names its section,
`method.md §6.9 "Dependent examples"`, must find that name in the section's own text (from its heading to
the next section of the same or a higher level), so a number that lands one section early fails here.

    scripts/section_refs.py [--root DIR]

Exit status 1 listing each pointer that does not resolve (file, line, pointer, why); 0 otherwise.
"""
import argparse
import os
import re
import subprocess
import sys

POINTER = re.compile(r'(?<!shared/)method\.md §(\d+(?:\.\d+)*)(?: "([^"]+)")?')
HEADING = re.compile(r'^(?:#{2,3} (\d+(?:\.\d+)*)\.? |\*\*(\d+\.\d+) )')


def sections(text):
    """{number: section text}: from its heading to the next heading of the same or a higher level."""
    lines = text.split("\n")
    starts = []
    for i, line in enumerate(lines):
        m = HEADING.match(line)
        if m:
            starts.append((i, m.group(1) or m.group(2)))
    out = {}
    for k, (i, num) in enumerate(starts):
        depth = num.count(".")
        end = len(lines)
        for j, other in starts[k + 1:]:
            if other.count(".") <= depth:
                end = j
                break
        out[num] = "\n".join(lines[i:end])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    a = ap.parse_args()
    with open(os.path.join(a.root, "docs", "method.md"), encoding="utf-8") as f:
        secs = sections(f.read())
    listed = subprocess.run(["git", "-C", a.root, "ls-files", "src", "apps", "python", "bench", "scripts", "tests"],
                            capture_output=True, text=True)
    if listed.returncode == 0:
        files = listed.stdout.split()
    else:  # not a git checkout (a source archive): every file below the folders
        files = [os.path.relpath(os.path.join(d, f), a.root)
                 for top in ("src", "apps", "python", "bench", "scripts", "tests")
                 for d, _, names in os.walk(os.path.join(a.root, top)) for f in names]
    bad, seen = [], 0
    for rel in files:
        if not rel.endswith((".hpp", ".cpp", ".h", ".py", ".sh", ".cu", ".cuh")):
            continue
        with open(os.path.join(a.root, rel), encoding="utf-8") as f:
            for line_no, line in enumerate(f, 1):
                for m in POINTER.finditer(line):
                    seen += 1
                    num, name = m.group(1), m.group(2)
                    if num not in secs:
                        bad.append(f"{rel}:{line_no}: {m.group(0)}: docs/method.md has no section {num}")
                    elif name and " ".join(name.split()).lower() not in " ".join(secs[num].split()).lower():
                        bad.append(f"{rel}:{line_no}: {m.group(0)}: section {num} does not contain \"{name}\"")
    for b in bad:
        print(b)
    print(f"section_refs: {seen} pointers into docs/method.md, {len(bad)} unresolved")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
