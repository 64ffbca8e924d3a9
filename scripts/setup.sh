#!/usr/bin/env bash
# Installs every Debian package arcal needs and builds build/arcal (Release) and the Python module
# build/python/arcal (pybind11, for Debian's /usr/bin/python3).
# Usage: scripts/setup.sh [--no-build]
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential cmake ninja-build pkg-config \
  libtorch-dev libgloo-dev libdnnl-dev libopenblas0-pthread libtcmalloc-minimal4 \
  libgtest-dev libgmock-dev libcli11-dev nlohmann-json3-dev libfmt-dev libtoml11-dev \
  libzip-dev zlib1g-dev \
  dataset-fashion-mnist dict-gcide gnuplot-nox \
  python3 python3-dev pybind11-dev python3-torch python3-numpy >/dev/null
if [ "${1:-}" != "--no-build" ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
  cmake --build build -j "$(nproc)"
  if [ -d build/python/arcal ]; then
    echo "Python module: export PYTHONPATH=$PWD/build/python   (then: /usr/bin/python3 -c 'import arcal'; docs/python.md)"
  fi
fi
