#!/usr/bin/env bash
# Megatron's non-persistent checkpoints (issue 58, item 2), global: --non-persistent-save-interval with
# --non-persistent-ckpt-type global saves a checkpoint into --save/non_persistent (or
# --non-persistent-global-ckpt-dir), only the newest kept; --load resumes from the newest of persistent and
# non-persistent with the uninterrupted run's next loss. The flags' rules. (Local: non_persistent_local_cli.sh.)
set -uo pipefail
tessera=${1:?usage: non_persistent_cli.sh path/to/tessera}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
unset TESSERA_INJECT_FAULT TESSERA_CKPT_WRITE_DELAY_MS
mpi=(timeout 60 mpirun --oversubscribe --allow-run-as-root -np 2)
model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data
       --tokenizer-type NullTokenizer --vocab-size 60 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3
       --log-interval 1 --eval-iters 0)
# loss LOG N: the lm loss of iteration N.
loss() { sed -nE "s/.*iteration +$2\/.*lm loss: ([^ ]+) .*/\1/p" "$1"; }
"$tessera" train "${model[@]}" --train-iters 7 >"$work/straight.log" 2>&1
check "the uninterrupted run: $(tail -2 "$work/straight.log")" $?

# 1. global, asynchronous, one process: persistent at 4, non-persistent at 1 2 3 5 6; the run fails in
# iteration 7 (an injected fault), as a crash would end it.
TESSERA_INJECT_FAULT=0:7:forward "$tessera" train "${model[@]}" --train-iters 20 --save "$work/g" --save-interval 4 \
  --non-persistent-save-interval 1 --non-persistent-ckpt-type global --async-save >"$work/g.log" 2>&1
grep -q "injected fault" "$work/g.log" && grep -q "saved non-persistent checkpoint (global) at iteration 6 to $work/g/non_persistent" "$work/g.log"
check "global: saves every iteration into --save/non_persistent until the fault: $(grep -E "saved|error" "$work/g.log" | tail -3)" $?
[ "$(ls "$work/g" | tr '\n' ' ')" = "iter_0000004 latest_checkpointed_iteration.txt non_persistent " ] &&
  [ "$(ls "$work/g/non_persistent" | tr '\n' ' ')" = "iter_0000006 latest_checkpointed_iteration.txt " ] &&
  [ "$(cat "$work/g/non_persistent/latest_checkpointed_iteration.txt")" = 6 ]
check "global: the persistent checkpoint of 4 stays, only the newest non-persistent one (6) is kept: $(ls "$work/g" "$work/g/non_persistent" | tr '\n' ' ')" $?
"$tessera" train "${model[@]}" --train-iters 7 --load "$work/g" --non-persistent-ckpt-type global >"$work/g2.log" 2>&1
check "global: resumes: $(tail -2 "$work/g2.log")" $?
grep -q "loaded checkpoint from $work/g/non_persistent (non-persistent, global) at iteration 6" "$work/g2.log"
check "global: from the newest, the non-persistent checkpoint of 6: $(grep loaded "$work/g2.log")" $?
[ -n "$(loss "$work/g2.log" 7)" ] && [ "$(loss "$work/g2.log" 7)" = "$(loss "$work/straight.log" 7)" ]
check "global: iteration 7's loss is the uninterrupted run's: $(loss "$work/g2.log" 7) / $(loss "$work/straight.log" 7)" $?
out=$("$tessera" train "${model[@]}" --train-iters 5 --load "$work/g" 2>&1)
grep -q "loaded checkpoint from $work/g at iteration 4" <<<"$out"
check "global: without --non-persistent-ckpt-type --load takes the persistent one, as Megatron: $(grep loaded <<<"$out")" $?

# 2. The flags' rules.
save=(--save "$work/rules")
expect_failure "--non-persistent-save-interval=0: must be positive" "$tessera" train "${model[@]}" --train-iters 1 "${save[@]}" \
  --non-persistent-save-interval 0 --non-persistent-ckpt-type global
expect_failure "--non-persistent-save-interval=-2: must be positive" "$tessera" train "${model[@]}" --train-iters 1 "${save[@]}" \
  --non-persistent-save-interval -2 --non-persistent-ckpt-type global
expect_failure "--non-persistent-save-interval=2: needs --non-persistent-ckpt-type global or local" \
  "$tessera" train "${model[@]}" --train-iters 1 "${save[@]}" --non-persistent-save-interval 2
expect_failure "--non-persistent-save-interval=2: needs --save DIR" \
  "$tessera" train "${model[@]}" --train-iters 1 --non-persistent-save-interval 2 --non-persistent-ckpt-type global
expect_failure "--non-persistent-ckpt-type=disk: must be one of global, local" \
  "$tessera" train "${model[@]}" --train-iters 1 "${save[@]}" --non-persistent-ckpt-type disk
expect_failure "--non-persistent-ckpt-type=in_memory: is not implemented (Megatron's in-memory checkpoints)" \
  "$tessera" train "${model[@]}" --train-iters 1 "${save[@]}" --non-persistent-ckpt-type in_memory
expect_failure "--non-persistent-ckpt-type=local: needs --non-persistent-local-ckpt-dir DIR" \
  "$tessera" train "${model[@]}" --train-iters 1 "${save[@]}" --non-persistent-ckpt-type local
expect_failure "--non-persistent-local-ckpt-dir=$work/x: needs --non-persistent-ckpt-type local" \
  "$tessera" train "${model[@]}" --train-iters 1 "${save[@]}" --non-persistent-local-ckpt-dir "$work/x"
expect_failure "--non-persistent-global-ckpt-dir=$work/x: needs --non-persistent-ckpt-type global" \
  "$tessera" train "${model[@]}" --train-iters 1 "${save[@]}" --non-persistent-global-ckpt-dir "$work/x" \
  --non-persistent-ckpt-type local --non-persistent-local-ckpt-dir "$work/y"
expect_failure "is --save's directory: its older non-persistent checkpoints are removed" \
  "$tessera" train "${model[@]}" --train-iters 1 "${save[@]}" --non-persistent-ckpt-type global \
  --non-persistent-global-ckpt-dir "$work/rules/"
expect_failure "--non-persistent-ckpt-type=local: is not supported with --use-distributed-optimizer yet" \
  "$tessera" train "${model[@]}" --train-iters 1 "${save[@]}" --non-persistent-ckpt-type local \
  --non-persistent-local-ckpt-dir "$work/y" --use-distributed-optimizer
# An explicit global directory is used for saving and for --load.
"$tessera" train "${model[@]}" --train-iters 3 "${save[@]}" --save-interval 10 --non-persistent-save-interval 2 \
  --non-persistent-ckpt-type global --non-persistent-global-ckpt-dir "$work/elsewhere" >"$work/e.log" 2>&1
[ "$(cat "$work/elsewhere/latest_checkpointed_iteration.txt" 2>/dev/null)" = 2 ] && [ ! -e "$work/rules/non_persistent" ]
check "--non-persistent-global-ckpt-dir: saved there: $(ls "$work/elsewhere" "$work/rules" 2>&1 | tr '\n' ' ')" $?

finish non_persistent_cli
