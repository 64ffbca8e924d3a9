#!/usr/bin/env bash
# Training throughput (images/s) of every preset and residual mode on synthetic CIFAR-shaped data:
# batch 64, one thread, --max-steps N (summary.json's images_per_second: training steps only, no
# evaluation). Usage: bench/presets_throughput.sh [BUILD_DIR] [STEPS_VIT] [STEPS_BIG] > table.md
set -euo pipefail
BUILD="${1:-build}"
STEPS_VIT="${2:-30}"
STEPS_BIG="${3:-8}"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
/usr/bin/python3 - "$WORK/cifar" <<'PY'
import numpy as np, os, sys
d = sys.argv[1]; os.makedirs(d)
rng = np.random.default_rng(0)
for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
    n = 400 if name != "test_batch.bin" else 64
    rec = np.empty((n, 3073), np.uint8)
    rec[:, 0] = rng.integers(0, 10, n)
    rec[:, 1:] = rng.integers(0, 256, (n, 3072))
    rec.tofile(os.path.join(d, name))
PY
echo "| preset | residual | params | GMACs/img | steps | images/s |"
echo "|---|---|---:|---:|---:|---:|"
for preset in ar-vit-tiny ar-deit-small ar-swin-tiny; do
  steps=$STEPS_BIG
  [ "$preset" = ar-vit-tiny ] && steps=$STEPS_VIT
  for mode in full block standard; do
    args=(--dataset cifar10 --data-dir "$WORK/cifar" --model "$preset" --residual "$mode" --block-size 4)
    dry=$("$BUILD/arcal" train "${args[@]}" --dry-run --json)
    "$BUILD/arcal" train "${args[@]}" --batch-size 64 --threads 1 --max-steps "$steps" --sbece-weight 0.5 \
      --quiet --out "$WORK/run-$preset-$mode" > /dev/null
    /usr/bin/python3 - "$preset" "$mode" "$steps" "$WORK/run-$preset-$mode/summary.json" "$dry" <<'PY'
import json, sys
preset, mode, steps, path, dry = sys.argv[1:6]
s = json.load(open(path)); d = json.loads(dry)
print(f"| {preset} | {mode} | {d['parameters']:,} | {d['macs_per_image']/1e9:.3f} | {steps} | {s['images_per_second']:.1f} |")
PY
  done
done
