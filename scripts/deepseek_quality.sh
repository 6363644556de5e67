#!/usr/bin/env bash
# DeepSeek-V3's training recipe on Brown, at toy size: does it train as the paper says?
#  - balancing: the same 8-expert top-2 MoE GPT routed with softmax scores and the auxiliary loss only
#    (aux_loss) or sigmoid scores and the auxiliary loss (aux_loss_sigmoid), with sigmoid scores and the
#    aux-loss-free expert bias only (aux_free: DeepSeek-V3's
#    --moe-router-enable-expert-bias, bias += rate * sign(mean - count) once per global batch, used for
#    selection only), and with sigmoid scores and neither (unbalanced: what the bias corrects). Plotted: the
#    coefficient of variation of the experts' token counts over training, and the validation loss.
#  - multi-token prediction: a dense GPT without and with one MTP module (--mtp-num-layers 1, factor 0.1);
#    plotted: the main head's validation loss (the MTP module only adds a training signal).
# Every run has the same steps, data order, seed and hyper-parameters.
#
# usage: scripts/deepseek_quality.sh [TESSERA_BINARY]
#   TESSERA_DATA_CACHE  data cache (default data-cache; needs brown/brown_sp4096_text_document: scripts/run.sh,
#                       or scripts/prepare_brown.sh TESSERA data-cache/brown 4096)
#   OUT_DIR             where the runs' logs go (default out/deepseek_quality)
#   PNG_PREFIX          the plots' prefix (default docs/images/deepseek_quality: _balance.png, _mtp.png)
#   RUNS                which runs, by name (default: all of the list below)
#   TRAIN_ITERS, LR, LAYERS, HIDDEN, HEADS, SEQ, BATCH, SEED   override the settings below
set -euo pipefail
[ -n "${1:-}" ] && tessera=$(realpath "$1")
cd "$(dirname "$0")/.."
tessera=${tessera:-$(realpath build/release/tessera)}
out=${OUT_DIR:-out/deepseek_quality}
png=${PNG_PREFIX:-docs/images/deepseek_quality}
source scripts/lib/brown_quality.sh
brown_quality_settings 600

moe="--num-experts 8 --moe-router-topk 2"
sigmoid="--moe-router-score-function sigmoid --moe-router-topk-scaling-factor 2.5"
declare -A flags=(
  [aux_loss]="$moe --moe-router-load-balancing-type aux_loss --moe-aux-loss-coeff 1e-2"
  [aux_loss_sigmoid]="$moe $sigmoid --moe-router-load-balancing-type aux_loss --moe-aux-loss-coeff 1e-2"
  [aux_free]="$moe $sigmoid --moe-router-load-balancing-type none --moe-router-enable-expert-bias --moe-router-bias-update-rate 1e-3"
  [unbalanced]="$moe $sigmoid --moe-router-load-balancing-type none"
  [dense]=""
  [dense_mtp1]="--mtp-num-layers 1 --mtp-loss-scaling-factor 0.1"
)
runs=(${RUNS:-aux_loss aux_loss_sigmoid aux_free unbalanced dense dense_mtp1})

brown_quality_train "$out" "--position-embedding-type rope --normalization RMSNorm --swiglu --disable-bias-linear" "${runs[@]}"

all=()
for name in "${runs[@]}"; do all+=("$out/$name"); done
/usr/bin/python3 scripts/plot_deepseek_quality.py "${all[@]}" --output-prefix "$png" --title \
  "Llama-style GPT on Brown: $layers layers x $hidden, seq $seq, batch $batch, lr $lr cosine, $iters iterations"
