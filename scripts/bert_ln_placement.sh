#!/usr/bin/env bash
# Pre-LN against post-LN BERT on Brown at two depths (issue 17): the finding of Shoeybi et al. (2019),
# section 3, in miniature. Builds (once, in the data cache) a WordPiece vocabulary trained on Brown's
# training text and the sentence-split .bin/.idx dataset, then trains four BERTs, {pre-LN, post-LN} x
# {shallow, deep}, with the same learning rate, warm-up, steps, batch and seed, and plots their MLM
# loss curves in one PNG.
#
# usage: scripts/bert_ln_placement.sh [TESSERA_BINARY]
#   TESSERA_DATA_CACHE  data cache (default data-cache; needs brown/brown.jsonl, from scripts/setup.sh)
#   OUT_DIR             where the four runs' logs go (default out/bert_ln_placement)
#   PNG                 the plot (default docs/images/bert_ln_placement.png)
#   TRAIN_ITERS, LR, WARMUP, SHALLOW, DEEP, HIDDEN, HEADS, SEQ   override the settings below
set -euo pipefail
[ -n "${1:-}" ] && tessera=$(realpath "$1")
cd "$(dirname "$0")/.."
tessera=${tessera:-$(realpath build/release/tessera)}
cache=${TESSERA_DATA_CACHE:-data-cache}
brown=$cache/brown
out=${OUT_DIR:-out/bert_ln_placement}
png=${PNG:-docs/images/bert_ln_placement.png}
# One thread: on the shared 2-core machine (load 8-9 from other jobs) a 12-layer step took 3091 ms with
# OMP_NUM_THREADS=2 against 466 ms with 1, as two OpenMP threads wait on each other's descheduled peer.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

iters=${TRAIN_ITERS:-800}
lr=${LR:-3e-3}
warmup=${WARMUP:-10}
shallow=${SHALLOW:-2}
deep=${DEEP:-12}
hidden=${HIDDEN:-64}
heads=${HEADS:-4}
seq=${SEQ:-64}

# Once: the documents in a fixed random order and the 98% used for training (shared with scripts/run.sh),
# a 4096-piece WordPiece vocabulary trained on that 98% only, and the sentence-per-line dataset.
[ -f "$brown/brown.jsonl" ] || { echo "no $brown/brown.jsonl: run scripts/setup.sh (or scripts/fetch_brown.sh)" >&2; exit 1; }
if [ ! -f "$brown/brown_train.txt" ]; then
  /usr/bin/python3 scripts/brown_split.py "$brown/brown.jsonl" "$brown/brown_shuffled.jsonl" "$brown/brown_train.txt"
fi
vocab=$brown/brown_wp4096-vocab.txt
if [ ! -f "$vocab" ]; then
  "$tessera" tokenizer train --model-type wordpiece --input "$brown/brown_train.txt" \
    --model-prefix "$brown/brown_wp4096" --vocab-size 4096
fi
data=$brown/brown_wp4096_text_sentence
if [ ! -f "$data.idx" ]; then
  "$tessera" preprocess --input "$brown/brown_shuffled.jsonl" --output-prefix "$brown/brown_wp4096" \
    --tokenizer-type BertWordPieceLowerCase --vocab-file "$vocab" --split-sentences --workers "$(nproc)"
fi

mkdir -p "$out"
runs=()
for layers in "$shallow" "$deep"; do
  for ln in pre post; do
    name=${ln}ln_${layers}l
    extra=()
    [ "$ln" = post ] && extra=(--apply-residual-connection-post-layernorm)
    rm -rf "$out/$name"
    echo "== $name: $layers layers, ${ln}-LN"
    start=$(date +%s.%N)
    "$tessera" pretrain_bert --data-path "$data" --split 98,2,0 \
      --tokenizer-type BertWordPieceLowerCase --vocab-file "$vocab" \
      --num-layers "$layers" --hidden-size "$hidden" --num-attention-heads "$heads" \
      --seq-length "$seq" --max-position-embeddings "$seq" \
      --micro-batch-size 16 --global-batch-size 16 --train-iters "$iters" \
      --lr "$lr" --min-lr 0 --lr-decay-style linear --lr-warmup-iters "$warmup" --clip-grad 1.0 --seed 1234 \
      --log-interval 20 --eval-interval 100 --eval-iters 8 \
      --log-dir "$out/$name" "${extra[@]}" | tee "$out/$name.log"
    end=$(date +%s.%N)
    awk -v s="$start" -v e="$end" -v n="$iters" 'BEGIN { printf "wall: %.1f s, %.1f ms per iteration (with evaluation)\n", e - s, 1000 * (e - s) / n }' | tee -a "$out/$name.log"
    runs+=("$out/$name")
  done
done

/usr/bin/python3 scripts/plot_bert_ln.py "${runs[@]}" --output "$png" --title \
  "BERT on Brown: hidden $hidden, seq $seq, lr $lr, warm-up $warmup, batch 16, $iters iterations"
