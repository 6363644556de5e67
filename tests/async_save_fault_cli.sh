#!/usr/bin/env bash
# A save that fails (issue 58, items 1 and 3): a write that fails on one rank (TESSERA_INJECT_FAULT=RANK:IT:save,
# after its first file) ends every rank with that rank's message, asynchronous or not, within seconds,
# and the tracker keeps naming the checkpoint before it. (Killed jobs: async_save_kill_cli.sh.)
set -uo pipefail
tessera=${1:?usage: async_save_fault_cli.sh path/to/tessera}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"
source "$(dirname "$0")/lib/checkpoint_checks.sh"  # complete DIR
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
unset TESSERA_INJECT_FAULT TESSERA_CKPT_WRITE_DELAY_MS
mpirun="mpirun --oversubscribe --allow-run-as-root -np 2"
model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data
       --tokenizer-type NullTokenizer --vocab-size 60 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3
       --log-interval 1 --eval-iters 0 --tensor-model-parallel-size 2)

# A write failing on rank 1 in the save of iteration 4 (iteration 2's is complete).
for mode in async sync; do
  flag=(); [ $mode = async ] && flag=(--async-save)
  start=$(date +%s)
  TESSERA_INJECT_FAULT=1:4:save timeout 60 $mpirun "$tessera" train "${model[@]}" --train-iters 8 --save-interval 2 \
    --save "$work/fail-$mode" "${flag[@]}" >"$work/fail-$mode.log" 2>&1
  rc=$?
  elapsed=$(($(date +%s) - start))
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $elapsed -le 30 ]
  check "$mode: the job ends with an error, not a hang (rc $rc, ${elapsed}s): $(tail -3 "$work/fail-$mode.log")" $?
  grep -qE "rank [01]: error: the checkpoint of iteration 4 could not be saved: rank 1 failed writing its files: injected fault \(TESSERA_INJECT_FAULT\) in the save of iteration 4 on rank 1, after writing $work/fail-$mode/iter_0000004.tmp/" \
    "$work/fail-$mode.log"
  check "$mode: the error names the iteration, the rank and its message: $(grep error "$work/fail-$mode.log")" $?
  ! grep -q "iteration        6/" "$work/fail-$mode.log"
  check "$mode: training stopped at the failed save (no iteration 6): $(grep -c "iteration " "$work/fail-$mode.log")" $?
  [ "$(complete "$work/fail-$mode" 2>&1)" = 2 ] && [ ! -e "$work/fail-$mode/iter_0000004" ]
  check "$mode: the tracker still names the complete checkpoint of iteration 2: $(ls "$work/fail-$mode")" $?
done

finish async_save_fault_cli
