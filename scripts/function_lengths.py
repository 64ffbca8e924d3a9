#!/usr/bin/env python3
"""Reports C++ functions longer than a limit (default 200 lines) in src/ and apps/.

A brace-matching scan of each .cpp file, not a parser: comments, string and character literals
(raw strings included) are blanked first, then every `{` at namespace or class scope whose header
(the text since the previous `;`, `{` or `}` at that depth) ends like a function signature --
`)` optionally followed by const/noexcept/override/final/mutable, a trailing return type or a
constructor's initializer list -- opens a function body, lambdas passed at namespace scope (the
ARCAL_COMMAND setups) included. A function's length is counted from the first line of its header
to its closing brace. Lambdas and local classes inside a function count toward that function.

    scripts/function_lengths.py [--limit N] [--root DIR] [--all]

Exit status 1 when a function exceeds the limit (the list names file, line, length and function),
0 otherwise; --all lists every function longer than 50 lines, longest first.
"""
import argparse
import os
import re
import sys

SCOPE_KEYWORDS = ("namespace", "class", "struct", "union", "enum", "extern")
CONTROL_KEYWORDS = ("if", "for", "while", "switch", "catch", "do", "else", "try", "return")
SIGNATURE_END = re.compile(
    r"\)\s*(?:(?:const|noexcept(?:\s*\([^()]*\))?|override|final|mutable|&|&&)\s*)*"
    r"(?:->\s*[\w:<>,\s*&]+)?\s*(?::\s*[\s\S]*)?$")


def blank_literals(text):
    """The text with comments and string/char literals replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^()\\\s]{0,16})\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = ")" + m.group(1) + '"'
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            # A digit separator (1'000'000) is not a character literal.
            if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum() and \
                    re.match(r"[0-9a-fA-FxX']", text[i - 1]):
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(n, j + 1)
            out.append(c + " " * max(0, j - i - 2) + (c if j - i >= 2 else ""))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def is_function_header(header):
    h = " ".join(header.split())
    if not h or h.endswith("="):
        return False
    first = re.match(r"[A-Za-z_]\w*", h.lstrip("#"))
    if first and first.group(0) in CONTROL_KEYWORDS:
        return False
    if re.match(r"(?:template\s*<[^{]*>\s*)?(?:typedef\s+)?(?:%s)\b" % "|".join(SCOPE_KEYWORDS), h) and \
            not re.search(r"\)\s*$", h):
        return False
    return bool(SIGNATURE_END.search(h)) and "(" in h


def function_name(header):
    h = " ".join(header.split())
    depth, cut = 0, None
    for idx, ch in enumerate(h):  # the first top-level '(' ends the name
        if ch == "(" and depth == 0:
            cut = idx
            break
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
    words = (h[:cut] if cut is not None else h).split()
    if not words:
        return "?"
    return "lambda" if "[" in words[-1] else words[-1]


def scan(path):
    """Yields (start_line, end_line, name) for every function body in the file."""
    text = blank_literals(open(path, encoding="utf-8", errors="replace").read())
    # Preprocessor lines never open or close a scope.
    text = re.sub(r"(?m)^[ \t]*#(?:[^\n\\]|\\\n|\\.)*", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    line_of = []
    line = 1
    for ch in text:
        line_of.append(line)
        if ch == "\n":
            line += 1
    stack = []  # per open brace: ("scope" | "function" | "block", start index, name)
    header_start = 0
    for i, ch in enumerate(text):
        if ch == ";":
            if not stack or stack[-1][0] == "scope":
                header_start = i + 1
        elif ch == "{":
            if not stack or stack[-1][0] == "scope":
                header = text[header_start:i]
                if is_function_header(header):
                    offset = len(header) - len(header.lstrip())
                    stack.append(("function", header_start + offset, function_name(header)))
                elif re.match(r"\s*(?:template\s*<[^{]*>\s*)?(?:%s)\b" % "|".join(SCOPE_KEYWORDS), header) \
                        or not header.strip():
                    stack.append(("scope", i, header.strip()))
                else:
                    stack.append(("block", i, header.strip()))  # an initializer at namespace scope
            else:
                stack.append(("inner", i, ""))
            header_start = i + 1
        elif ch == "}":
            if not stack:
                continue
            kind, start, name = stack.pop()
            if kind == "function":
                yield line_of[start], line_of[i], name
            if not stack or stack[-1][0] == "scope":
                header_start = i + 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=200, help="longest allowed function, in lines (200)")
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."),
                    help="the source tree (default: this script's project)")
    ap.add_argument("--all", action="store_true", help="list every function over 50 lines, longest first")
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    found = []
    for top in ("src", "apps"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if f.endswith(".cpp"):
                    p = os.path.join(dirpath, f)
                    for start, end, name in scan(p):
                        found.append((end - start + 1, os.path.relpath(p, root), start, name))
    found.sort(key=lambda t: (-t[0], t[1], t[2]))
    shown = [t for t in found if t[0] > (50 if a.all else a.limit)]
    for length, rel, start, name in shown:
        print("%s:%d: %s: %d lines%s" % (rel, start, name, length, " (over %d)" % a.limit if length > a.limit else ""))
    over = [t for t in found if t[0] > a.limit]
    print("%d function(s) in %d scanned over %d lines" % (len(over), len(found), a.limit))
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
