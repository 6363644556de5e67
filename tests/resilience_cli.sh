#!/usr/bin/env bash
# Issue 58's rerun state machine and straggler report under mpirun at np 2 (a tiny model, 5 iterations):
#  - a NaN loss on rank 1 at iteration 3 on the first run only (transient): under --rerun-mode report_stats
#    the step is re-run and training goes on with the same losses as a run without it; under
#    validate_results every rank exits 17 after saving iteration 2, and the job resumed from it ends on
#    the same losses;
#  - the NaN on every run (deterministic): exit 16, the message naming iteration, rank and check, the
#    tracker file (--result-rejected-tracker-filename) Megatron's lines;
#  - bit flips: an exponent bit of rank 0's loss at iteration 4, caught by --check-for-spiky-loss and
#    named "Spiky loss": on the first run only (transient) exit 17, on every run (persistent) exit 16;
#    an exponent bit of a gradient on rank 1 at iteration 3, on the first run only: no check sees it
#    (the losses go astray), but report_stats' re-run of every step tells it and goes on with the clean
#    result (the losses of the uninjected run);
#  - --error-injection-rate 1 --error-injection-type transient_error under report_stats: every step re-run,
#    the same losses; persistent_error: exit 16;
#  - --log-straggler with rank 1 slowed (TESSERA_STRAGGLER_DELAY_MS) names rank 1 as the slowest (and
#    with --disable-straggler-on-startup reports nothing);
#  - the flags' values checked before any work.
set -uo pipefail
tessera=${1:?usage: resilience_cli.sh path/to/tessera}
source "$(dirname "$0")/lib/checks.sh"
command -v mpirun >/dev/null || skip "no mpirun"
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpirun="mpirun --oversubscribe --allow-run-as-root -np 2"
model="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data
       --tokenizer-type NullTokenizer --vocab-size 40 --micro-batch-size 1 --global-batch-size 4 --lr 1e-3
       --log-interval 1 --eval-iters 0 --train-iters 5"
# losses LOG: "N lm-loss" per iteration.
losses() { sed -nE 's/.* iteration +([0-9]+)\/.*\| lm loss: ([^ ]+) .*/\1 \2/p' "$1"; }
# run NAME [ENV=VALUE...] -- FLAGS...: trains at np 2 into $work/NAME.log; $rc is mpirun's status.
run() {
  local name=$1 env=()
  shift
  while [ "$1" != "--" ]; do env+=(-x "$1"); shift; done
  shift
  $mpirun "${env[@]}" "$tessera" train $model "$@" >"$work/$name.log" 2>&1
  rc=$?
}

run plain -- --rerun-mode validate_results --log-straggler --disable-straggler-on-startup
check "an uninjected run: $(tail -5 "$work/plain.log")" $rc
[ "$(losses "$work/plain.log" | wc -l)" -eq 5 ]; check "5 iterations logged: $(tail -3 "$work/plain.log")" $?
! grep -q "straggler report" "$work/plain.log"; check "no straggler report with --disable-straggler-on-startup" $?

# Transient NaN: report_stats goes on with the re-run's result, the losses those of the plain run.
run transient TESSERA_INJECT_LOSS=1:3:nan_once -- --rerun-mode report_stats
check "transient NaN under report_stats goes on (rc $rc): $(tail -5 "$work/transient.log")" $rc
grep -q "rerun: iteration 3, rank 1: found NaN in local forward loss calculation; re-running" "$work/transient.log"
check "the transient NaN is named with iteration, rank and check: $(grep rerun "$work/transient.log")" $?
grep -q "iteration 3: rank 1: the re-run's result differs" "$work/transient.log"
check "the re-run is reported as a transient fault: $(grep rerun "$work/transient.log")" $?
diff <(losses "$work/plain.log") <(losses "$work/transient.log") >/dev/null
check "transient NaN: the losses of the uninjected run: $(losses "$work/transient.log" | tr '\n' ' ')" $?

# Transient NaN under validate_results: exit 17 after saving iteration 2; resumed, the same losses.
run transient17 TESSERA_INJECT_LOSS=1:3:nan_once -- --save "$work/ckpt17" --save-interval 100
[ "$rc" -eq 17 ]; check "transient NaN under validate_results exits 17 (rc $rc): $(tail -5 "$work/transient17.log")" $?
grep -q "not reproduced by the re-run" "$work/transient17.log"; check "says transient: $(grep rerun "$work/transient17.log")" $?
[ "$(cat "$work/ckpt17/latest_checkpointed_iteration.txt" 2>/dev/null)" = 2 ]
check "iteration 2 saved before the exit: $(ls "$work/ckpt17" 2>&1)" $?
run resumed17 -- --load "$work/ckpt17"
check "resumes after the exit: $(tail -3 "$work/resumed17.log")" $rc
diff <(losses "$work/plain.log" | tail -3) <(losses "$work/resumed17.log") >/dev/null
check "resumed: the losses of iterations 3-5 of the uninjected run: $(losses "$work/resumed17.log" | tr '\n' ' ')" $?

# Deterministic NaN: exit 16, named; Megatron's tracker lines.
run persistent TESSERA_INJECT_LOSS=1:3:nan -- --result-rejected-tracker-filename "$work/tracker.txt"
[ "$rc" -eq 16 ]; check "persistent NaN exits 16 (rc $rc): $(tail -5 "$work/persistent.log")" $?
grep -q "rerun: iteration 3, rank 1: found NaN in local forward loss calculation: reproduced by the re-run" \
  "$work/persistent.log"
check "the exit names iteration, rank and check: $(grep rerun "$work/persistent.log")" $?
[ "$(losses "$work/persistent.log" | wc -l)" -eq 2 ]; check "no iteration 3 logged: $(losses "$work/persistent.log")" $?
grep -q "rank=1 iteration=3 status=initial_run result=loss=nan" "$work/tracker.txt" &&
  grep -q "rank=1 iteration=3 status=first_rerun_reproducible" "$work/tracker.txt"
check "tracker lines: $(cat "$work/tracker.txt" 2>&1)" $?

# A bit flip in the loss: a spike (the maximum of the first 2 losses sampled, for a short test).
run flip_once TESSERA_INJECT_LOSS=0:4:bitflip_once TESSERA_SPIKY_LOSS_SAMPLES=2 -- --check-for-spiky-loss
[ "$rc" -eq 17 ] && grep -q "rerun: iteration 4, rank 0: Spiky loss: not reproduced by the re-run" "$work/flip_once.log"
check "a transient bit flip in the loss is a spike, not reproduced: exit 17 (rc $rc): $(grep rerun "$work/flip_once.log")" $?
run flip TESSERA_INJECT_LOSS=0:4:bitflip TESSERA_SPIKY_LOSS_SAMPLES=2 -- --check-for-spiky-loss
[ "$rc" -eq 16 ] && grep -q "rerun: iteration 4, rank 0: Spiky loss: reproduced by the re-run" "$work/flip.log"
check "a persistent bit flip in the loss is a spike, reproduced: exit 16 (rc $rc): $(grep rerun "$work/flip.log")" $?

# A bit flip in a gradient on rank 1: silent to the checks, told by report_stats' re-run.
run gradflip_silent TESSERA_INJECT_LOSS=1:3:grad_bitflip_once --
check "a gradient bit flip passes the checks (rc $rc): $(grep rerun "$work/gradflip_silent.log")" $rc
! diff <(losses "$work/plain.log") <(losses "$work/gradflip_silent.log") >/dev/null
check "unchecked, the flipped gradient changes the losses: $(losses "$work/gradflip_silent.log" | tr '\n' ' ')" $?
run gradflip TESSERA_INJECT_LOSS=1:3:grad_bitflip_once -- --rerun-mode report_stats
check "a gradient bit flip under report_stats goes on (rc $rc)" $rc
grep -q "rerun: iteration 3: rank 1: the re-run's result differs from the first run's (a transient fault)" \
  "$work/gradflip.log"
check "report_stats names the flipped rank as transient: $(grep rerun "$work/gradflip.log")" $?
diff <(losses "$work/plain.log") <(losses "$work/gradflip.log") >/dev/null
check "report_stats goes on with the re-run's clean result: $(losses "$work/gradflip.log" | tr '\n' ' ')" $?

# Megatron's error injection: every check fails once per step and rank; transient re-runs go on.
run injected -- --rerun-mode report_stats --error-injection-rate 1 --error-injection-type transient_error
check "injected transient errors under report_stats go on (rc $rc): $(tail -3 "$work/injected.log")" $rc
[ "$(grep -c "injected transient_error" "$work/injected.log")" -eq 5 ]
check "an injection named per iteration: $(grep -m2 rerun "$work/injected.log")" $?
diff <(losses "$work/plain.log") <(losses "$work/injected.log") >/dev/null
check "injected transient errors: the uninjected losses: $(losses "$work/injected.log" | tr '\n' ' ')" $?
run injected16 -- --error-injection-rate 1 --error-injection-type persistent_error
[ "$rc" -eq 16 ] && grep -q "rerun: iteration 1, rank 0: injected persistent_error" "$work/injected16.log"
check "an injected persistent error exits 16 (rc $rc): $(grep rerun "$work/injected16.log")" $?

# Straggler report: rank 1 sleeps 60 ms in each iteration's forward.
run straggler TESSERA_STRAGGLER_DELAY_MS=1:60 -- --log-straggler
check "a run with --log-straggler (rc $rc): $(tail -3 "$work/straggler.log")" $rc
[ "$(grep -c "straggler report at iteration" "$work/straggler.log")" -eq 5 ] &&
  grep "straggler report at iteration 5" "$work/straggler.log" | grep -qE "slowest: rank 1 [0-9.]+x"
check "rank 1 named the slowest: $(grep straggler "$work/straggler.log" | tail -1)" $?

# The flags' values, before any work.
expect_failure "--rerun-mode=validate: must be one of disabled, validate_results, report_stats" \
  "$tessera" train $model --rerun-mode validate
expect_failure "--error-injection-type=transient: must be one of" "$tessera" train $model --error-injection-type transient
expect_failure "--error-injection-rate=-1: must be >= 0" "$tessera" train $model --error-injection-rate -1
expect_failure "--error-injection-rate=4: needs --rerun-mode validate_results or report_stats" \
  "$tessera" train $model --error-injection-rate 4 --rerun-mode disabled
expect_failure "--straggler-minmax-count=0: must be positive" "$tessera" train $model --straggler-minmax-count 0
finish resilience_cli
