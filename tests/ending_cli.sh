#!/usr/bin/env bash
# How a training job ends under mpirun, as a scheduler and a failing rank make it end:
#  - SIGTERM to every rank (what Slurm sends before a time limit or on preemption) with
#    --exit-signal-handler: each rank finishes its iteration, the job saves a checkpoint and exits 0;
#  - an error thrown on one rank in the middle of a pipeline-parallel or tensor-parallel step
#    (TESSERA_INJECT_FAULT) ends every rank within 10 seconds, with that rank's message, rather than
#    leaving the others waiting in a collective until the timeout.
set -uo pipefail
tessera=${1:?usage: ending_cli.sh path/to/tessera}
source "$(dirname "$0")/lib/checks.sh"
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
mpirun="mpirun --oversubscribe --allow-run-as-root"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

model="--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --mock-data
       --tokenizer-type NullTokenizer --vocab-size 100 --micro-batch-size 1 --global-batch-size 4 --lr 1e-3
       --log-interval 1 --eval-iters 0"

# wait_for PATTERN FILE SECONDS: until FILE has a line matching PATTERN.
wait_for() {
  for _ in $(seq 1 $(($3 * 10))); do
    grep -qE "$1" "$2" && return 0
    sleep 0.1
  done
  return 1
}

# --- SIGTERM at np 2: a checkpoint and exit status 0.
log=$work/sigterm.log
$mpirun -np 2 "$tessera" train $model --train-iters 100000 --exit-signal-handler --save "$work/ckpt" \
  --save-interval 1000000 >"$log" 2>&1 &
launcher=$!
wait_for "iteration +3/" "$log" 120
ok=$?; check "training should get under way: $(tail -5 "$log")" $ok
ranks=$(pgrep -P $launcher -f "tessera train")
[ "$(wc -w <<<"$ranks")" -eq 2 ]
check "mpirun should have 2 rank processes, found '$ranks'" $?
kill -TERM $ranks
wait $launcher
rc=$?
[ $rc -eq 0 ]
ok=$?; check "after SIGTERM the job should exit 0, got $rc: $(tail -5 "$log")" $ok
grep -q "exiting program after receiving SIGTERM" "$log"
ok=$?; check "the log should say why it stopped: $(tail -5 "$log")" $ok
saved=$(cat "$work/ckpt/latest_checkpointed_iteration.txt" 2>/dev/null)
[ -n "$saved" ] && [ "$saved" -ge 3 ] && [ -f "$work/ckpt/iter_$(printf %07d "$saved")/index.json" ]
check "a complete checkpoint should be saved at the last iteration (latest: '$saved')" $?
out=$("$tessera" train $model --train-iters $((saved + 1)) --load "$work/ckpt" 2>&1)
grep -q "loaded checkpoint from $work/ckpt at iteration $saved" <<<"$out"
check "the checkpoint should resume: $out" $?

# --- A fault on one rank mid-schedule ends the job quickly with that rank's message.
for layout in "--pipeline-model-parallel-size 2:1:3:backward" "--pipeline-model-parallel-size 2:0:3:forward" \
              "--tensor-model-parallel-size 2:1:3:forward" "--tensor-model-parallel-size 2 --sequence-parallel:0:3:backward"; do
  flags=${layout%%:*}
  fault=${layout#*:}
  rank=${fault%%:*}
  log=$work/fault.log
  start=$(date +%s.%N)
  TESSERA_INJECT_FAULT=$fault timeout 120 $mpirun -np 2 "$tessera" train $model $flags --train-iters 1000 >"$log" 2>&1
  rc=$?
  elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
  # The time from the iteration before the fault to the end of the job.
  [ $rc -ne 0 ] && [ $rc -ne 124 ]
  ok=$?; check "$flags, fault $fault: the job should fail (rc $rc): $(tail -5 "$log")" $ok
  grep -q "rank $rank: error: injected fault (TESSERA_INJECT_FAULT) in the" "$log"
  ok=$?; check "$flags, fault $fault: the failing rank's message should be printed: $(tail -8 "$log")" $ok
  awk -v t="$elapsed" 'BEGIN { exit !(t <= 10) }'
  check "$flags, fault $fault: every rank should end within 10 s, took $elapsed s" $?
done

expect_failure "TESSERA_INJECT_FAULT=bogus: expected RANK:ITERATION:forward|backward" \
  env TESSERA_INJECT_FAULT=bogus "$tessera" train $model --train-iters 1

finish ending_cli
