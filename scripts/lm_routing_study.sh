#!/usr/bin/env bash
# Issue 28, end to end: seed 002's two systems in the language model (docs/results.md "Routing
# interventions in the language model" and "CEDAR in the language model's prefill").
#   bash scripts/lm_routing_study.sh [OUT]        (OUT defaults to runs/lm_routing)
# 1. train: Block AttnRes ar-lm-tiny-nope (S = 2, no position embedding, so it runs past its training
#    context) and its standard-residual twin, context 512, side by side on one thread each
#    (about 13 minutes on 2 cores);
# 2. intervene: every source family at every routing point, and at the attention and MLP points
#    together, on 64 test sequences (32,768 next-byte predictions), for the AttnRes model and for the
#    twin wrapped as Block AttnRes with the uniform schedule (about 5 minutes);
# 3. cedar-lm: CEDAR (and its first-order ablation), hard top-k, summaries only and dense in the
#    AttnRes model's causal prefill at 512 (its training length), 2048 and 8192 tokens, and the kernel
#    time per layer at 2K-32K on the model's own layer-0 q/k/v (about 6 minutes on one thread).
# Each step skips what it finds done (a trained run, an existing result), so the script resumes.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/lm_routing}
ARCAL=${ARCAL:-build/arcal}
mkdir -p "$OUT"
train() {  # train RESIDUAL DIR [CONTEXT BATCH STEPS]
  if [ -f "$2/model.pt" ]; then return 0; fi
  if [ -f "$2/checkpoint.pt" ]; then "$ARCAL" train --resume --quiet --out "$2"; return; fi
  "$ARCAL" train --dataset gcide --model ar-lm-tiny-nope --residual "$1" --block-size 2 --context "${3:-512}" \
    --batch-size "${4:-8}" --max-steps "${5:-500}" --epochs 1 --lr 2e-3 --warmup-fraction 0.05 --weight-decay 0.05 \
    --sbece-weight 0 --val-fraction 0.005 --precision auto --threads 1 --seed 0 --quiet --out "$2"
}
start=$(date +%s)
train block "$OUT/block" & pid1=$!
train standard "$OUT/standard" & pid2=$!
wait $pid1
wait $pid2
echo "trained in $(( $(date +%s) - start )) s"

start=$(date +%s)
if [ ! -f "$OUT/intervene_block.json" ]; then
  "$ARCAL" intervene --run "$OUT/block" --subset 64 --threads 2 --figures "$OUT/figures_block" \
    --out "$OUT/intervene_block.json" | tee "$OUT/intervene_block.txt"
fi
if [ ! -f "$OUT/intervene_twin.json" ]; then
  "$ARCAL" intervene --run "$OUT/standard" --as-attnres block --block-size 2 --subset 64 --threads 2 \
    --figures "$OUT/figures_twin" --out "$OUT/intervene_twin.json" | tee "$OUT/intervene_twin.txt"
fi
for m in block twin; do python3 scripts/intervene_table.py "$OUT/intervene_$m.json" > "$OUT/intervene_$m.md"; done
echo "interventions in $(( $(date +%s) - start )) s"

start=$(date +%s)
if [ ! -f "$OUT/cedar/results.json" ]; then
  "$ARCAL" cedar-lm --run "$OUT/block" --contexts 512,2048,8192 --budgets 2,4,8 --chunk 64 --tokens 65536 \
    --timing-contexts 2048,8192,32768 --first-order --threads 1 --out "$OUT/cedar" | tee "$OUT/cedar.txt"
fi
echo "cedar-lm in $(( $(date +%s) - start )) s"

