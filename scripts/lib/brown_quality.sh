# Sourced by scripts/moe_quality.sh and scripts/deepseek_quality.sh: the settings and the training loop of
# their quality runs on Brown (same steps, data order, seed and hyper-parameters for every run; each run
# differs only by its flags).
#
# brown_quality_settings DEFAULT_ITERS: reads TRAIN_ITERS, LR, LAYERS, HIDDEN, HEADS, SEQ, BATCH, SEED and
#   TESSERA_DATA_CACHE into iters, lr, layers, hidden, heads, seq, batch, seed, brown and data; checks the
#   dataset exists.
# brown_quality_train OUT ARCHITECTURE_FLAGS RUN...: trains each named RUN with ${flags[RUN]} (an
#   associative array the caller declares) into OUT/RUN (TensorBoard, logs) and OUT/RUN.log.

brown_quality_settings() {
  iters=${TRAIN_ITERS:-$1}
  lr=${LR:-1.5e-3}
  layers=${LAYERS:-2}
  hidden=${HIDDEN:-128}
  heads=${HEADS:-4}
  seq=${SEQ:-128}
  batch=${BATCH:-8}
  seed=${SEED:-1234}
  brown=${TESSERA_DATA_CACHE:-data-cache}/brown
  data=$brown/brown_sp4096_text_document
  [ -f "$data.idx" ] || { echo "no $data.idx: run scripts/run.sh once (it builds the tokenizer and dataset)" >&2; exit 1; }
  # One thread: on the shared 2-core machine two OpenMP threads wait on each other's descheduled peer
  # (BENCHMARKS.md, "BERT: pre-LN against post-LN").
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
}

brown_quality_train() {
  local out=$1 architecture=$2 name start end
  shift 2
  mkdir -p "$out"
  for name in "$@"; do
    [ -n "${flags[$name]+x}" ] || { echo "unknown run $name (runs: ${!flags[*]})" >&2; exit 1; }
  done
  for name in "$@"; do
    rm -rf "${out:?}/$name"
    echo "== $name: ${flags[$name]:-dense}"
    echo "flags:${flags[$name]:+ }${flags[$name]}" > "$out/$name.log"
    start=$(date +%s.%N)
    # shellcheck disable=SC2086  # the flags are words
    "$tessera" train \
      --num-layers "$layers" --hidden-size "$hidden" --num-attention-heads "$heads" \
      --seq-length "$seq" --max-position-embeddings "$seq" $architecture \
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
}
