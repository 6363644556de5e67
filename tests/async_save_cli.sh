#!/usr/bin/env bash
# --async-save (issue 58, item 1): the files a background thread writes are byte for byte those of a
# synchronous save, at tp 2 (both ranks write model files) and at dp 2 with the distributed optimizer
# (both write their moments' pieces); a save is finalised at a later step while training goes on; the
# losses are those of the synchronous run, and resuming from an asynchronous checkpoint gives the
# uninterrupted run's next losses.
set -uo pipefail
tessera=${1:?usage: async_save_cli.sh path/to/tessera}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
unset TESSERA_INJECT_FAULT TESSERA_CKPT_WRITE_DELAY_MS
mpi=(timeout 60 mpirun --oversubscribe --allow-run-as-root -np 2)
model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data
       --tokenizer-type NullTokenizer --vocab-size 60 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3
       --log-interval 1 --eval-iters 0)
# losses LOG: "iteration:loss" of every iteration line.
losses() { sed -nE 's/.*iteration +([0-9]+)\/.*lm loss: ([^ ]+) .*/\1:\2/p' "$1" | tr '\n' ' '; }

for layout in "tp2:--tensor-model-parallel-size 2" "dp2:--use-distributed-optimizer"; do
  name=${layout%%:*}
  read -ra flags <<<"${layout#*:}"
  "${mpi[@]}" "$tessera" train "${model[@]}" "${flags[@]}" --train-iters 4 --save-interval 2 \
    --save "$work/$name-sync" >"$work/$name-sync.log" 2>&1
  check "$name: the synchronous run: $(tail -3 "$work/$name-sync.log")" $?
  # Each file's write is slowed (a slow disk), so the save of iteration 2 is still being written at the
  # step boundaries after it: training goes on and the save is finalised later.
  TESSERA_CKPT_WRITE_DELAY_MS=150 "${mpi[@]}" "$tessera" train "${model[@]}" "${flags[@]}" --train-iters 4 \
    --save-interval 2 --save "$work/$name-async" --async-save >"$work/$name-async.log" 2>&1
  check "$name: the asynchronous run: $(tail -3 "$work/$name-async.log")" $?
  diff -r "$work/$name-sync" "$work/$name-async" >"$work/diff.txt" 2>&1
  check "$name: the asynchronous checkpoints are byte-identical to the synchronous ones: $(head -5 "$work/diff.txt")" $?
  [ "$(ls "$work/$name-async" | tr '\n' ' ')" = "iter_0000002 iter_0000004 latest_checkpointed_iteration.txt " ] &&
    [ "$(cat "$work/$name-async/latest_checkpointed_iteration.txt")" = 4 ]
  check "$name: both checkpoints complete, the tracker at 4: $(ls "$work/$name-async")" $?
  [ -n "$(losses "$work/$name-sync.log")" ] && [ "$(losses "$work/$name-sync.log")" = "$(losses "$work/$name-async.log")" ]
  check "$name: the same losses: $(losses "$work/$name-sync.log") / $(losses "$work/$name-async.log")" $?
  # The order of the log: started at 2, iteration 3 trained, finalised later.
  order=$(grep -nE "started asynchronous save of checkpoint at iteration 2|iteration +3/|saved checkpoint at iteration 2 .*asynchronous" \
    "$work/$name-async.log" | cut -d: -f1 | tr '\n' ' ')
  read -r started third saved <<<"$order"
  [ -n "$saved" ] && [ "$started" -lt "$third" ] && [ "$third" -lt "$saved" ]
  check "$name: the save of iteration 2 started, iteration 3 trained while it was written, then it was finalised (lines $order): $(grep -E "save|iteration +3/" "$work/$name-async.log" | cut -c1-120)" $?
done

# Resume from the asynchronous checkpoint of iteration 2 (the tracker pointed back at it): the next
# losses are the uninterrupted run's.
mkdir -p "$work/resume"
cp -r "$work/tp2-async/iter_0000002" "$work/resume/"
echo 2 >"$work/resume/latest_checkpointed_iteration.txt"
"${mpi[@]}" "$tessera" train "${model[@]}" --tensor-model-parallel-size 2 --train-iters 4 --load "$work/resume" \
  --save "$work/resume" --save-interval 2 --async-save >"$work/resume.log" 2>&1
check "resume from the asynchronous checkpoint: $(tail -3 "$work/resume.log")" $?
grep -q "loaded checkpoint from $work/resume at iteration 2" "$work/resume.log"
check "it loaded iteration 2: $(grep loaded "$work/resume.log")" $?
expected=$(losses "$work/tp2-sync.log" | tr ' ' '\n' | grep -E "^(3|4):" | tr '\n' ' ')
[ -n "$expected" ] && [ "$(losses "$work/resume.log")" = "$expected" ]
check "the resumed losses are the uninterrupted run's: $(losses "$work/resume.log") / $expected" $?
cmp -s "$work/resume/iter_0000004/model.tp01.pp00.safetensors" "$work/tp2-sync/iter_0000004/model.tp01.pp00.safetensors" &&
  cmp -s "$work/resume/iter_0000004/optim.tp00.pp00.dp000.safetensors" "$work/tp2-sync/iter_0000004/optim.tp00.pp00.dp000.safetensors"
check "and its checkpoint of iteration 4 has the uninterrupted run's tensors" $?

# The flag needs somewhere to save.
expect_failure "--async-save=true: needs --save DIR" "$tessera" train "${model[@]}" --train-iters 1 --async-save

finish async_save_cli
