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
cache=${TESSERA_DATA_CACHE:-data-cache}
brown=$cache/brown
out=${OUT_DIR:-out/deepseek_quality}
png=${PNG_PREFIX:-docs/images/deepseek_quality}
# One thread: on the shared 2-core machine two OpenMP threads wait on each other's descheduled peer.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

iters=${TRAIN_ITERS:-600}
lr=${LR:-1.5e-3}
layers=${LAYERS:-2}
hidden=${HIDDEN:-128}
heads=${HEADS:-4}
seq=${SEQ:-128}
batch=${BATCH:-8}
seed=${SEED:-1234}
data=$brown/brown_sp4096_text_document
[ -f "$data.idx" ] || { echo "no $data.idx: run scripts/run.sh once (it builds the tokenizer and dataset)" >&2; exit 1; }

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

mkdir -p "$out"
for name in "${runs[@]}"; do
  [ -n "${flags[$name]+x}" ] || { echo "unknown run $name (runs: ${!flags[*]})" >&2; exit 1; }
  rm -rf "${out:?}/$name"
  echo "== $name: ${flags[$name]:-dense}"
  echo "flags:${flags[$name]:+ }${flags[$name]}" > "$out/$name.log"
  start=$(date +%s.%N)
  # shellcheck disable=SC2086  # the flags are words
  "$tessera" train \
    --num-layers "$layers" --hidden-size "$hidden" --num-attention-heads "$heads" \
    --seq-length "$seq" --max-position-embeddings "$seq" --position-embedding-type rope \
    --normalization RMSNorm --swiglu --disable-bias-linear \
    --data-path "$data" --split 98,2,0 \
    --tokenizer-type SentencePieceTokenizer --tokenizer-model "$brown/brown_sp4096.model" \
    --micro-batch-size "$batch" --global-batch-size "$batch" --train-iters "$iters" \
    --lr "$lr" --min-lr "$(awk -v l="$lr" 'BEGIN { print l / 10 }')" --lr-decay-style cosine --lr-warmup-fraction 0.05 \
    --weight-decay 0.1 --clip-grad 1.0 --hidden-dropout 0 --attention-dropout 0 --seed "$seed" \
    --log-interval 20 --eval-interval 100 --eval-iters 8 \
    ${flags[$name]} --log-dir "$out/$name" >> "$out/$name.log" 2>&1
  end=$(date +%s.%N)
  awk -v s="$start" -v e="$end" -v n="$iters" 'BEGIN { printf "wall: %.1f s, %.1f ms per iteration (with evaluation)\n", e - s, 1000 * (e - s) / n }' | tee -a "$out/$name.log"
  grep -E 'validation loss at iteration' "$out/$name.log" | tail -1
done

all=()
for name in "${runs[@]}"; do all+=("$out/$name"); done
/usr/bin/python3 scripts/plot_deepseek_quality.py "${all[@]}" --output-prefix "$png" --title \
  "Llama-style GPT on Brown: $layers layers x $hidden, seq $seq, batch $batch, lr $lr cosine, $iters iterations"
