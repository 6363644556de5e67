#!/usr/bin/env bash
# Mixture of experts on Brown (issue 18): a small dense GPT and MoE versions of it (8 and 16 experts,
# top-1 and top-2, and a pyramid-residual PR-MoE as DeepSpeed-MoE), trained with the same steps, data
# order, seed and hyper-parameters, then validation loss plotted against training FLOPs. One more run,
# 8 experts top-1 without the auxiliary loss, is the "balance emerges" check (its expert load cv
# against the aux-loss run's).
#
# usage: scripts/moe_quality.sh [TESSERA_BINARY]
#   TESSERA_DATA_CACHE  data cache (default data-cache; needs brown/brown_sp4096_text_document, from
#                       scripts/run.sh)
#   OUT_DIR             where the runs' logs go (default out/moe_quality)
#   PNG                 the plot (default docs/images/moe_quality.png)
#   RUNS                which runs, by name (default: all of the list below, in order)
#   TRAIN_ITERS, LR, LAYERS, HIDDEN, HEADS, SEQ, BATCH   override the settings below
set -euo pipefail
[ -n "${1:-}" ] && tessera=$(realpath "$1")
cd "$(dirname "$0")/.."
tessera=${tessera:-$(realpath build/release/tessera)}
out=${OUT_DIR:-out/moe_quality}
png=${PNG:-docs/images/moe_quality.png}
source scripts/lib/brown_quality.sh
brown_quality_settings 400

# name: the MoE flags (empty: dense; dense_ffn1024, a dense model with the MLP twice as wide, costs the
# FLOPs of top-2 and of PR-MoE). MoE in the MLP slot of every layer (--moe-layer-freq 1); top-1
# routes with pre-softmax scores so that the router gets gradient from the LM loss; aux loss 1e-2.
# moe8_top1_softmax_after is top-1 without it: the one routing probability is
# then 1, the experts' outputs are not scaled down, and the router learns from the aux loss alone.
declare -A flags=(
  [dense]=""
  [dense_ffn1024]="--ffn-hidden-size 1024"
  [moe8_top1]="--num-experts 8 --moe-router-topk 1 --moe-router-pre-softmax --moe-aux-loss-coeff 1e-2"
  [moe8_top2]="--num-experts 8 --moe-router-topk 2 --moe-aux-loss-coeff 1e-2"
  [moe16_top1]="--num-experts 16 --moe-router-topk 1 --moe-router-pre-softmax --moe-aux-loss-coeff 1e-2"
  [moe16_top2]="--num-experts 16 --moe-router-topk 2 --moe-aux-loss-coeff 1e-2"
  [prmoe_4_8_top1]="--num-experts 4 8 --mlp-type residual --moe-router-topk 1 --moe-router-pre-softmax --moe-aux-loss-coeff 1e-2"
  [moe8_top1_softmax_after]="--num-experts 8 --moe-router-topk 1 --moe-aux-loss-coeff 1e-2"
  [moe8_top1_noaux]="--num-experts 8 --moe-router-topk 1 --moe-router-pre-softmax --moe-aux-loss-coeff 0"
)
runs=(${RUNS:-dense dense_ffn1024 moe8_top1 moe8_top2 moe16_top1 moe16_top2 prmoe_4_8_top1 moe8_top1_softmax_after moe8_top1_noaux})

brown_quality_train "$out" "" "${runs[@]}"

all=()
for name in "${runs[@]}"; do all+=("$out/$name"); done
/usr/bin/python3 scripts/plot_moe_quality.py "${all[@]}" --hidden "$hidden" --layers "$layers" --output "$png" --title \
  "GPT on Brown: $layers layers x $hidden, seq $seq, batch $batch, lr $lr cosine, $iters iterations, 1 thread"
