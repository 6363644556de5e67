#!/usr/bin/env bash
# The time a checkpoint save blocks training, synchronous against --async-save, at GPT-2 124M
# (12 layers, hidden 768, padded vocabulary 50304: 124,475,904 parameters, a 1.49 GB checkpoint with
# the Adam moments). Each run trains ITERS iterations with a save at SAVE_AT (the final save, which
# waits for its write at the end of training, is left out); printed: the save's log line, and the time
# per iteration of the iterations after it (the background write competes with them for the cores).
#   bench/async_save.sh path/to/tessera [ITERS=6] [SAVE_AT=3] [DIR=/tmp/tessera_async_bench]
set -euo pipefail
tessera=${1:?usage: async_save.sh path/to/tessera [iters] [save_at] [dir]}
iters=${2:-6}
save_at=${3:-3}
dir=${4:-/tmp/tessera_async_bench}
M=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 256 --max-position-embeddings 1024
   --mock-data --tokenizer-type NullTokenizer --vocab-size 50256 --micro-batch-size 1 --global-batch-size 2
   --lr 1e-4 --eval-iters 0 --log-interval 1)
for mode in sync async; do
  rm -rf "$dir/$mode"
  flag=(); [ $mode = async ] && flag=(--async-save)
  "$tessera" train "${M[@]}" --train-iters "$iters" --save-interval "$save_at" --save "$dir/$mode" "${flag[@]}" \
    >"$dir.$mode.log" 2>&1
  echo "== $mode"
  grep -E "(started asynchronous save|saved checkpoint) .*iteration $save_at " "$dir.$mode.log" | sed 's/^ *//'
  sed -nE 's/.*iteration +([0-9]+)\/.*elapsed time per iteration \(ms\): ([0-9.]+).*/  iteration \1: \2 ms/p' \
    "$dir.$mode.log" | tr '\n' ' '
  echo
done
cmp -s "$dir/sync/iter_$(printf %07d "$save_at")/optim.tp00.pp00.dp000.safetensors" \
  "$dir/async/iter_$(printf %07d "$save_at")/optim.tp00.pp00.dp000.safetensors" && echo "the two checkpoints' optimizer files are identical"
rm -rf "$dir"
