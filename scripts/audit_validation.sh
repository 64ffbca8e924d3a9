#!/usr/bin/env bash
# Regenerates the tables of docs/audit_validation.md: builds bench/validate_audit (build-bench/,
# -DARCAL_BUILD_BENCH=ON) and runs each part (diagnostic, probes, exact-null; default all three),
# replacing the text between <!-- table:PART --> and <!-- end:PART --> in docs/audit_validation.md and
# writing the rows as CSV to docs/figures/validation/PART.csv. Extra arguments after `--` go to
# validate_audit (e.g. -- --null-runs 100). Builds take ARCAL_BUILD_LOCK (default
# /tmp/arcal-build.lock) so they never overlap other builds. About 25 min on one core with the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
lock=${ARCAL_BUILD_LOCK:-/tmp/arcal-build.lock}
parts=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do parts+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#parts[@]} -eq 0 ] && parts=(diagnostic probes exact-null)
# ARCAL_BENCH_BUILD: a configured build directory with -DARCAL_BUILD_BENCH=ON to use instead of build-bench/.
bdir=${ARCAL_BENCH_BUILD:-build-bench}
if [ ! -f "$bdir/build.ninja" ]; then
  launcher=()
  if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
  cmake -S . -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DARCAL_BUILD_BENCH=ON -DARCAL_BUILD_TESTS=OFF \
    "${launcher[@]}" >/dev/null
fi
flock "$lock" cmake --build "$bdir" -j2 --target validate_audit
mkdir -p docs/figures/validation
for part in "${parts[@]}"; do
  md=$(mktemp)
  "$bdir/bench/validate_audit" --only "$part" --out "$md" --csv "docs/figures/validation/$part.csv" "$@"
  python3 - "$part" "$md" <<'PY'
import sys, pathlib
part, table = sys.argv[1], pathlib.Path(sys.argv[2]).read_text()
doc = pathlib.Path("docs/audit_validation.md")
text = doc.read_text()
start, end = f"<!-- table:{part} -->", f"<!-- end:{part} -->"
i, j = text.index(start) + len(start), text.index(end)
tmp = doc.with_suffix(".md.tmp")
tmp.write_text(text[:i] + "\n" + table.rstrip() + "\n" + text[j:])
tmp.replace(doc)
PY
  rm -f "$md"
done
