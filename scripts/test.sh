#!/usr/bin/env bash
# Sets up (Debian packages + Release build) and runs the test suite with ctest.
# The default suite excludes the label "long"; ARCAL_LONG_TESTS=1 runs those too.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Test-only packages: headless Chromium renders report.html for the report test's screenshot; pytest,
# SciPy (the independent temperature fit) and jsonschema run the Python module's suite (tests/python);
# venv, setuptools and pip run the install test (`pip install --no-build-isolation .` into a venv).
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
  chromium python3-pytest python3-scipy python3-jsonschema python3-venv python3-setuptools python3-pip >/dev/null
cd build
ctest --output-on-failure -j2 -LE long
if [ "${ARCAL_LONG_TESTS:-0}" = 1 ]; then
  cmake -S .. -B . -DARCAL_LONG_TESTS=ON >/dev/null
  ctest --output-on-failure -L long
fi
