#!/usr/bin/env bash
# bf16 and fp16 against fp32: the default model of scripts/run.sh trained for 200 iterations on the
# Brown corpus in each precision, same seed and data. Prints the loss of the last 10 iterations and the
# validation loss beside fp32's, the relative differences, the time per iteration, and fp16's skipped
# iterations and final loss scale. Usage: bench/mixed_precision.sh [path/to/tessera] [iterations]
set -euo pipefail
cd "$(dirname "$0")/.."
tessera=${1:-build/release/tessera}
iters=${2:-200}
cache=${TESSERA_DATA_CACHE:-data-cache}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
model=(--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128
       --data-path "$cache/brown/brown_text_document" --split 98,2,0 --tokenizer-type GPT2BPETokenizer
       --vocab-file "$cache/gpt2/gpt2-vocab.json" --merge-file "$cache/gpt2/gpt2-merges.txt"
       --micro-batch-size 4 --global-batch-size 8 --train-iters "$iters" --lr 1e-3 --min-lr 1e-4
       --lr-decay-style cosine --lr-warmup-fraction 0.1 --weight-decay 0.1 --clip-grad 1.0
       --hidden-dropout 0 --attention-dropout 0 --log-interval 1 --eval-interval "$iters" --eval-iters 5)

last10() { grep -oE "lm loss: [0-9.E+-]+" <<<"$1" | grep -oE "[0-9.E+-]+$" | tail -10 |
           awk '{ s += $1 } END { printf "%.4f", s / NR }'; }
valid() { grep -oE "lm loss value: [0-9.E+-]+" <<<"$1" | tail -1 | grep -oE "[0-9.E+-]+$" | awk '{ printf "%.4f", $1 }'; }
ms() { grep -oE "elapsed time per iteration \(ms\): [0-9.]+" <<<"$1" | grep -oE "[0-9.]+$" | tail -n +2 |
       sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
rel() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.2f%%", 100 * (a - b) / b }'; }
echo "| precision | last 10 iterations' loss | vs fp32 | validation loss | vs fp32 | ms/iteration (median) | skipped iterations | final loss scale |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for precision in "" --bf16 --fp16; do
  out=$("$tessera" train "${model[@]}" $precision 2>&1)
  l=$(last10 "$out"); v=$(valid "$out")
  if [ -z "$precision" ]; then ref_l=$l; ref_v=$v; fi
  skipped=$(grep -oE "number of skipped iterations: +[0-9]+" <<<"$out" | grep -oE "[0-9]+$" | awk '{ s += $1 } END { print s }')
  scale=$(grep -oE "loss scale: [0-9.]+" <<<"$out" | tail -1 | grep -oE "[0-9.]+$")
  echo "| ${precision:-fp32} | $l | $(rel "$l" "$ref_l") | $v | $(rel "$v" "$ref_v") | $(ms "$out") | $skipped | $scale |"
done
