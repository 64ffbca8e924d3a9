#!/usr/bin/env bash
# Builds and runs one libFuzzer target of tests/fuzz for SECONDS seconds under AddressSanitizer and
# UndefinedBehaviorSanitizer (clang-14 from Debian's clang-14 + libclang-rt-14-dev; no LibTorch).
#
#   scripts/fuzz.sh TARGET SECONDS [LIBFUZZER_FLAGS...]
#   TARGET: npy npz trace trace_meta idx cifar study_toml run_config results_json calibrator_json
#
# Reads the committed corpus tests/fuzz/corpus/TARGET (seeds and crash reproducers) and grows a
# working corpus in build-fuzz/corpus/TARGET. A finding is written to build-fuzz/crash-TARGET-*;
# once fixed, copy it to tests/fuzz/corpus/TARGET/crash-NAME, where the normal test suite replays
# it (ctest -R fuzz_replay). The whole libFuzzer log is build-fuzz/TARGET.log; its last lines give
# the executions (#N DONE ... exec/s), coverage (cov:, ft:) and corpus size.
# Builds take ARCAL_BUILD_LOCK (default /tmp/arcal-build.lock) so they never overlap other builds.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: scripts/fuzz.sh TARGET SECONDS}
seconds=${2:?usage: scripts/fuzz.sh TARGET SECONDS}
cxx=${ARCAL_FUZZ_CXX:-clang++-14}
lock=${ARCAL_BUILD_LOCK:-/tmp/arcal-build.lock}
# Debian packages for fuzzing only (not needed by the test suite): clang-14 and its runtimes.
if ! command -v "$cxx" >/dev/null || ! ls /usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends clang-14 libclang-rt-14-dev >/dev/null
fi
if [ ! -f build-fuzz/build.ninja ]; then
  launcher=()
  if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER="$cxx" \
    -DARCAL_FUZZ=ON -DARCAL_WITH_TORCH=OFF -DARCAL_BUILD_TESTS=OFF "${launcher[@]}" >/dev/null
fi
flock "$lock" cmake --build build-fuzz --target "fuzz_$target" -j2 >/dev/null
mkdir -p "build-fuzz/corpus/$target"
# Findings stop the run: UBSan aborts (-fno-sanitize-recover), ASan reports and exits.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
# Inputs longer than max_len are cut while mutating: the seeds of the size limits (an 80 MiB gzip
# bomb, 100 KB TOML arrays) still run in full, but mutants stay small enough for thousands of runs a
# second. Further arguments after SECONDS go to libFuzzer.
extra=()
case "$target" in
  idx | study_toml) extra=(-max_len=8192) ;;
esac
set +e
"build-fuzz/tests/fuzz/fuzz_$target" -max_total_time="$seconds" -rss_limit_mb=2560 -malloc_limit_mb=2560 -timeout=20 \
  -print_final_stats=1 -artifact_prefix="build-fuzz/crash-$target-" "${extra[@]}" "${@:3}" \
  "build-fuzz/corpus/$target" "tests/fuzz/corpus/$target" >"build-fuzz/$target.log" 2>&1
rc=$?
set -e
grep -E "^#[0-9]+[[:space:]]+(INITED|DONE)|^stat::|ERROR|SUMMARY|Test unit written" "build-fuzz/$target.log" | tail -n 12
exit $rc
