#!/usr/bin/env bash
# Builds everything with -fsanitize=address,undefined (-DARCAL_SANITIZE=ON, in build-asan/) and runs
# the default test suite (ctest -LE long) under it. Builds take ARCAL_BUILD_LOCK
# (default /tmp/arcal-build.lock) so they never overlap other builds.
#
# Debian's LibTorch, OpenBLAS and Python are not instrumented. Sanitizer options, and why:
#   detect_odr_violation=2  (ASan's default, stated) on: BinScheme and NadarayaWatsonOptions are each
#                           defined once now, and the uninstrumented LibTorch globals do not trip it;
#   detect_leaks=0          LibTorch and OpenBLAS keep their thread pools and caches until exit, which
#                           LeakSanitizer reports as leaks in every test process;
#   alloc_dealloc_mismatch=0  LibTorch frees with free() some buffers allocated with new[];
# every other ASan and UBSan check is on and aborts the test (UBSan: -fno-sanitize-recover).
set -euo pipefail
cd "$(dirname "$0")/.."
lock=${ARCAL_BUILD_LOCK:-/tmp/arcal-build.lock}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_odr_violation=2:detect_leaks=0:alloc_dealloc_mismatch=0:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
if [ ! -f build-asan/build.ninja ]; then
  launcher=()
  if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DARCAL_SANITIZE=ON "${launcher[@]}" >/dev/null
fi
flock "$lock" cmake --build build-asan -j2
cd build-asan
ctest --output-on-failure -j2 -LE long --timeout 3600 "$@"
