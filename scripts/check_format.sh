#!/usr/bin/env bash
# Every C++ file of src/, apps/, python/src/, tests/ and bench/ as clang-format (Debian 12's clang-format
# 14, installed by scripts/setup.sh) lays it out with the repository's .clang-format: the `format` ctest.
# Lists the files that differ (run `clang-format -i FILE` on them) and exits 1; 0 when all are formatted.
set -euo pipefail
cd "$(dirname "$0")/.."
CF="${CLANG_FORMAT:-clang-format}"
command -v "$CF" >/dev/null || { echo "check_format: $CF not found (scripts/setup.sh installs Debian's clang-format)"; exit 1; }
bad=0
n=0
while IFS= read -r -d '' f; do
  n=$((n + 1))
  if ! "$CF" --dry-run -Werror "$f" >/dev/null 2>&1; then
    echo "not formatted: $f"
    bad=$((bad + 1))
  fi
done < <(find src apps python/src tests bench -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print0)
echo "check_format: $n files, $bad not formatted ($("$CF" --version | head -1))"
[ "$bad" -eq 0 ]
