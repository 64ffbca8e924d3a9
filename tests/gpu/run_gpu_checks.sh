#!/usr/bin/env bash
# CUDA checks for arcal (tests/gpu/gpu_checks.cpp): CUDA vs CPU forward of every preset and mode
# (fp32, 1e-3 relative), bf16 autocast with fp32 routing, a short CIFAR-shaped GPU training run,
# then a CLI smoke run with --device cuda. Needs a build against a CUDA LibTorch, e.g.
#   cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=/opt/libtorch
#   cmake --build build-cuda && BUILD=build-cuda bash tests/gpu/run_gpu_checks.sh
# Without a GPU (or with a CPU-only LibTorch) it prints SKIP and exits 0.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD="${BUILD:-build}"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIP: no NVIDIA GPU visible (nvidia-smi absent or lists no device)"
  exit 0
fi
if [ ! -x "$BUILD/tests/gpu_checks" ]; then
  echo "FAIL: $BUILD/tests/gpu_checks not built (configure with ARCAL_BUILD_TESTS=ON)" >&2
  exit 1
fi
if ! "$BUILD/tests/gpu_checks" --cuda-available; then
  echo "SKIP: a GPU is present but $BUILD was built against a CPU-only LibTorch (see README 'Paper scale')"
  exit 0
fi
"$BUILD/tests/gpu_checks"
# CLI: the dry run and a few CUDA steps of each preset with bf16 autocast on synthetic CIFAR data.
DATA=$(mktemp -d)
trap 'rm -rf "$DATA"' EXIT
"$BUILD/tests/gpu_checks" --write-cifar "$DATA/cifar" >/dev/null
for preset in ar-vit-tiny ar-deit-small ar-swin-tiny; do
  "$BUILD/arcal" train --dataset cifar10 --data-dir "$DATA/cifar" --model "$preset" --residual full \
    --device cuda --precision bf16 --batch-size 64 --max-steps 20 --quiet --json --out "$DATA/run-$preset" \
    | grep -E '"(test_accuracy|images_per_second)"'
done
echo "PASS: GPU checks"
