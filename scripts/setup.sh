#!/usr/bin/env bash
# Sets up everything arcal needs on a fresh Debian 12 machine and builds it (Release):
#  - Debian's packages (compiler, CMake, OpenBLAS, oneDNN, GoogleTest, CLI11, JSON, fmt, toml11,
#    libzip, gnuplot, the Fashion-MNIST and GCIDE data, Python's venv);
#  - the project virtual environment .venv, filled by pip with the pinned torch (PyPI's, a 2.x CUDA
#    build that runs on the CPU), numpy and pybind11 (pyproject.toml's `setup` list);
#  - build/arcal (analysis), build/arcal-torch (training, tracing), the module build/python/arcal.
# Usage: scripts/setup.sh [--no-build]. ARCAL_VENV=DIR uses another virtual environment (made if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential cmake ninja-build pkg-config clang-format \
  libopenblas-dev libopenblas0-pthread libdnnl-dev libgloo-dev libtcmalloc-minimal4 \
  libgtest-dev libgmock-dev libcli11-dev nlohmann-json3-dev libfmt-dev libtoml11-dev \
  libzip-dev zlib1g-dev \
  dataset-fashion-mnist dict-gcide gnuplot-nox \
  python3 python3-dev python3-venv >/dev/null

VENV="${ARCAL_VENV:-$PWD/.venv}"
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import sys" 2>/dev/null; then
  /usr/bin/python3 -m venv --clear "$VENV"
fi
PY="$VENV/bin/python"
export PIP_DISABLE_PIP_VERSION_CHECK=1
# shellcheck disable=SC2046
"$PY" -m pip install -q $("$PY" scripts/pins.py setup)

# The torch in the venv must be one arcal builds against: one line naming what was found and what is
# needed, else.
"$PY" scripts/check_torch.py

if [ "${1:-}" != "--no-build" ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DARCAL_PYTHON="$PY" -DARCAL_WERROR="${ARCAL_WERROR:-OFF}" >/dev/null
  cmake --build build -j "$(nproc)"
  if [ -d build/python/arcal ]; then
    echo "Python module: export PYTHONPATH=$PWD/build/python   (then: $PY -c 'import arcal'; docs/python.md)"
  fi
fi
