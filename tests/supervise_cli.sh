#!/usr/bin/env bash
# Restart without losing work (issue 58, item 5): scripts/supervise.sh runs a tp 2 job under mpirun; one
# rank killed by SIGKILL in the middle of training ends the job, the tracker names a complete checkpoint,
# and the supervisor restarts the job from the newest (non-persistent, asynchronous) checkpoint, whose
# losses from there on are the uninterrupted run's. Exit 16 is not restarted, 17 is (up to
# --max-restarts), and the supervisor's options are checked.
set -uo pipefail
tessera=${1:?usage: supervise_cli.sh path/to/tessera}
supervise=$(dirname "$0")/../scripts/supervise.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"
source "$(dirname "$0")/lib/checkpoint_checks.sh"  # complete DIR
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
unset TESSERA_INJECT_FAULT TESSERA_CKPT_WRITE_DELAY_MS TESSERA_INJECT_LOSS TESSERA_STRAGGLER_DELAY_MS
mpirun=(mpirun --oversubscribe --allow-run-as-root -np 2)
model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data
       --tokenizer-type NullTokenizer --vocab-size 60 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3
       --log-interval 1 --eval-iters 0 --train-iters 14)
# losses LOG: "ITERATION LOSS" per logged iteration, the last of each (a restart logs some again).
losses() { sed -nE 's/.*iteration +([0-9]+)\/.*lm loss: ([^ ]+) .*/\1 \2/p' "$1" | sort -n -k1,1 -s | awk '{l[$1]=$2} END {for (i in l) print i, l[i]}' | sort -n; }

timeout 120 "${mpirun[@]}" "$tessera" train "${model[@]}" --tensor-model-parallel-size 2 >"$work/straight.log" 2>&1
check "the uninterrupted run: $(tail -2 "$work/straight.log")" $?

# 1. Rank 1 sleeps 150 ms per iteration (so that the kill lands mid-run); SIGKILL to a rank once the
# non-persistent checkpoint of iteration 5 is saved (finalised). Saves: persistent every 4 iterations, non-persistent (global) every one, all
# asynchronous.
dir=$work/ckpt
TESSERA_STRAGGLER_DELAY_MS=1:150 timeout 180 "$supervise" --max-restarts 2 --restart-delay 3 -- "${mpirun[@]}" \
  "$tessera" train "${model[@]}" --tensor-model-parallel-size 2 --save "$dir" --save-interval 4 --async-save \
  --non-persistent-save-interval 1 --non-persistent-ckpt-type global >"$work/sup.log" 2>&1 &
sup=$!
for _ in $(seq 1 600); do grep -qs "saved non-persistent checkpoint (global) at iteration 5 " "$work/sup.log" && break; sleep 0.1; done
victim=$(pgrep -f "^$tessera train .*--save $dir " | tail -1)  # a rank (mpirun's command line starts with mpirun)
[ -n "$victim" ] && kill -9 "$victim"
check "a rank of the first attempt was killed (pid ${victim:-none})" $([ -n "$victim" ]; echo $?)
for _ in $(seq 1 300); do grep -q "restart 1 of 2" "$work/sup.log" && break; sleep 0.1; done
grep -q "the job exited with status [1-9][0-9]* (a rank died or failed.*); restart 1 of 2 in 3 s from the newest complete checkpoint" "$work/sup.log"
check "the supervisor logs the restart: $(grep supervise: "$work/sup.log" | tail -2)" $?
# During the restart delay: both trackers name complete checkpoints.
persistent=$(complete "$dir" 2>&1)
check "the persistent tracker names a complete checkpoint: $persistent" $?
non_persistent=$(complete "$dir/non_persistent" 2>&1)
check "the non-persistent tracker names a complete checkpoint: $non_persistent" $?
wait $sup
rc=$?
check "the supervised job ends with status 0 after one restart (rc $rc): $(grep supervise: "$work/sup.log" | tail -2)" \
  $([ $rc -eq 0 ] && [ "$(grep -c "supervise: .*attempt" "$work/sup.log")" -eq 2 ]; echo $?)
grep -q "attempt 2 of at most 3: .* --load $dir$" "$work/sup.log"
check "the restart loads from --save's directory: $(grep "attempt 2" "$work/sup.log")" $?
from=$(sed -nE 's/.*loaded checkpoint from .* at iteration ([0-9]+) .*/\1/p' "$work/sup.log")
newest=$(( ${persistent:-0} > ${non_persistent:-0} ? ${persistent:-0} : ${non_persistent:-0} ))
[ -n "$from" ] && [ "$from" -eq "$newest" ] && [ "$from" -ge 5 ]
check "it resumed from the newest checkpoint of either kind, $newest (persistent ${persistent:-?}, non-persistent ${non_persistent:-?}): $(grep loaded "$work/sup.log")" $?
[ "$(losses "$work/sup.log")" = "$(losses "$work/straight.log")" ] && [ "$(losses "$work/sup.log" | wc -l)" -eq 14 ]
check "the losses of iterations 1-14 (those logged after the restart for $((from + 1))-14) are the uninterrupted run's:
$(diff <(losses "$work/sup.log") <(losses "$work/straight.log"))" $?

# 2. Exit statuses, one process: a NaN that the re-run reproduces exits 16, not restarted; a transient one
# (17) is restarted, and, injected again in the restarted job, ends the loop at --max-restarts.
one=("$tessera" train "${model[@]}" --train-iters 6 --save "$work/r")
TESSERA_INJECT_LOSS=0:3:nan timeout 120 "$supervise" --max-restarts 2 -- "${one[@]}" >"$work/r16.log" 2>&1
rc=$?
[ $rc -eq 16 ] && [ "$(grep -c "supervise: .*attempt" "$work/r16.log")" -eq 1 ] && grep -q "status 16 .*not restarted" "$work/r16.log"
check "exit 16 is returned, not restarted (rc $rc): $(grep supervise: "$work/r16.log" | tail -1)" $?
rm -rf "$work/r"
TESSERA_INJECT_LOSS=0:3:nan_once timeout 120 "$supervise" --max-restarts 1 -- "${one[@]}" >"$work/r17.log" 2>&1
rc=$?
[ $rc -eq 17 ] && [ "$(grep -c "supervise: .*attempt" "$work/r17.log")" -eq 2 ] &&
  grep -q "loaded checkpoint from $work/r at iteration 2" "$work/r17.log" && grep -q "max-restarts=1 reached" "$work/r17.log"
check "exit 17 is restarted from the checkpoint of iteration 2, up to --max-restarts (rc $rc): $(grep -E "supervise:|loaded" "$work/r17.log")" $?

# 3. The supervisor's options.
expect_failure "--max-restarts=-1: must be a non-negative integer" "$supervise" --max-restarts -1 -- "${one[@]}"
expect_failure "--restart-delay=soon: must be a non-negative number of seconds" "$supervise" --restart-delay soon -- "${one[@]}"
expect_failure "unknown option --retries (the command comes after --)" "$supervise" --retries 2 -- "${one[@]}"
expect_failure "the command has no --save DIR" "$supervise" -- "$tessera" train "${model[@]}"
expect_failure "usage:" "$supervise" --max-restarts 1

finish supervise_cli
