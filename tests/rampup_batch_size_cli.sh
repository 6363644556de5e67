#!/usr/bin/env bash
# Megatron's sample-based training: --train-samples with the learning-rate schedule in samples, and
# --rampup-batch-size START INCREMENT SAMPLES (and its successor --step-batch-size-schedule). A ramped run is checked against runs that cannot share its
# mistakes: the same iterations made by iteration-based runs of one global batch size each, resumed one
# from the other (the sample stream and the weights carry over); then the ramped run at dp 2, pp 2 and
# interleaved pp 2 against the single process, a run resumed in the middle of the ramp, the logged
# learning rates of a warm-up in samples, and the flags' refusals.
set -uo pipefail
tessera=${1:?usage: rampup_batch_size_cli.sh path/to/tessera}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
mpirun="mpirun --oversubscribe --allow-run-as-root"

model="--mock-data --tokenizer-type NullTokenizer --vocab-size 64 --num-layers 4 --hidden-size 32
       --num-attention-heads 4 --seq-length 16 --max-position-embeddings 16 --micro-batch-size 1 --lr 1e-3
       --lr-decay-style constant --eval-iters 0 --log-interval 1"
# Global batches 2, 2, 4, 6, then 8 and 8: the ramp's 3 increments come every 12 / 3 = 4 samples.
ramp="--global-batch-size 8 --train-samples 30 --rampup-batch-size 2 2 12"

losses() { grep -o 'lm loss: [0-9.E+-]*' <<<"$1" | awk '{print $3}' | tr '\n' ' '; }
batches() { grep -o 'global batch size: *[0-9]*' <<<"$1" | awk '{print $4}' | tr '\n' ' '; }
# close "what" "A" "B": the same number of values, each within 1e-5 relative
close() {
  python3 - "$2" "$3" <<'PY'
import sys
a, b = ([float(x) for x in s.split()] for s in sys.argv[1:3])
sys.exit(0 if len(a) == len(b) and a and all(abs(x - y) <= 1e-5 * abs(x) for x, y in zip(a, b)) else 1)
PY
  check "$1: $3 should be $2" $?
}

ramped=$("$tessera" train $model $ramp 2>&1)
check "ramped run exits 0: $ramped" $?
[ "$(batches "$ramped")" = "2 2 4 6 8 8 " ]
check "the logged global batches should be 2 2 4 6 8 8: $(batches "$ramped")" $?
grep -q "setting training iterations to 6" <<<"$ramped" &&
  grep -q "will use batch size rampup starting from global batch size 2 to global batch size 8 with batch size increments 2 over 12 samples." <<<"$ramped" &&
  grep -q "ramping up batch size from 4 to 6" <<<"$ramped"
check "Megatron's ramp lines in the log: $ramped" $?

# The same iterations by runs of one batch size each, each resuming the last one's checkpoint.
chain=""
previous=""
for step in "2 2" "4 3" "6 4" "8 6"; do
  set -- $step
  out=$("$tessera" train $model --global-batch-size "$1" --train-iters "$2" ${previous:+--load "$previous"} \
    --save "$work/chain$2" 2>&1)
  check "iteration-based run to iteration $2 at global batch $1 exits 0: $out" $?
  chain+=$(losses "$(grep ' iteration ' <<<"$out")")
  previous="$work/chain$2"
done
close "the ramped run's losses against the chain of constant-batch runs" "$chain" "$(losses "$ramped")"

# Every layout ramps the same way: the micro-batches per rank change with the batch.
close "dp 2" "$(losses "$ramped")" "$(losses "$($mpirun -np 2 "$tessera" train $model $ramp 2>&1)")"
close "pp 2" "$(losses "$ramped")" "$(losses "$($mpirun -np 2 "$tessera" train $model $ramp \
  --pipeline-model-parallel-size 2 2>&1)")"
close "interleaved pp 2" "$(losses "$ramped")" "$(losses "$($mpirun -np 2 "$tessera" train $model $ramp \
  --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 2>&1)")"

# Stopped after iteration 3 (8 samples consumed) and resumed: the ramp goes on from the samples consumed.
first=$("$tessera" train $model $ramp --save "$work/mid" --exit-interval 3 2>&1)
check "run stopped at iteration 3 exits 0: $first" $?
resumed=$("$tessera" train $model $ramp --load "$work/mid" 2>&1)
check "resumed run exits 0: $resumed" $?
[ "$(batches "$resumed")" = "6 8 8 " ]
check "the resumed run's global batches should be 6 8 8: $(batches "$resumed")" $?
close "resumed in the ramp" "$(losses "$ramped" | cut -d' ' -f4-)" "$(losses "$resumed")"

# The schedule in samples: a warm-up over 8 samples reaches 1e-3 when 8 are consumed (the logged rate
# is the one the iteration trained with, after 0, 2, 4, 8, 14 and 22 samples).
warm=$("$tessera" train $model $ramp --lr-warmup-samples 8 2>&1)
lrs=$(grep -o 'learning rate: [0-9.E+-]*' <<<"$warm" | awk '{printf "%g ", $3}')
[ "$lrs" = "0 0.00025 0.0005 0.001 0.001 0.001 " ]
check "learning rates of a warm-up in samples should be 0 0.00025 0.0005 0.001 0.001 0.001: $lrs" $?

expect_failure "--rampup-batch-size=2 2 12: needs --train-samples" "$tessera" train $model --global-batch-size 8 \
  --train-iters 4 --rampup-batch-size 2 2 12
expect_failure "--rampup-batch-size=3 5 8: passes through a global batch of 3, which must be divisible by --micro-batch-size=2" \
  "$tessera" train $model --micro-batch-size 2 --global-batch-size 8 --train-samples 30 --rampup-batch-size 3 5 8
expect_failure "--train-iters=4: cannot be combined with --train-samples" "$tessera" train $model \
  --global-batch-size 8 --train-iters 4 --train-samples 30

# Megatron's --step-batch-size-schedule, thresholds in tokens (64, 160, 200 at --seq-length 16 are samples
# 4, 10, 12): global batches 2 2 4 4 4 4 4 4 4 (the 8 of [10, 12) is jumped over: 8 consumed, then 12),
# 9 iterations to reach 30 samples (Megatron's loop: 32 consumed).
step="--train-samples 30 --step-batch-size-schedule"
sched="0:2 64:4 160:8 200:4"
stepped=$("$tessera" train $model $step "$sched" 2>&1)
check "step-schedule run exits 0: $stepped" $?
[ "$(batches "$stepped")" = "2 2 4 4 4 4 4 4 4 " ]
check "the step schedule's logged global batches should be 2 2 4 4 4 4 4 4 4: $(batches "$stepped")" $?
grep -q "setting training iterations to 9" <<<"$stepped" &&
  grep -q "> using step batch size schedule: 0:2 64:4 160:8 200:4" <<<"$stepped" &&
  grep -q "step batch size schedule: global batch size 2 -> 4 after 4 consumed samples" <<<"$stepped"
check "the step schedule's lines in the log: $stepped" $?
# A schedule that grows then shrinks (4, 8, 4): more micro-batches than the final size's in one
# iteration, at pp 2 and dp 2 against the single process.
shrink="0:4 96:8 192:4"  # samples 0, 6, 12: 4 4 8 4 4 ...
one=$("$tessera" train $model $step "$shrink" 2>&1)
check "shrinking step schedule exits 0: $one" $?
[ "$(batches "$one")" = "4 4 8 4 4 4 4 4 " ]
check "the shrinking schedule's global batches should be 4 4 8 4 4 4 4 4: $(batches "$one")" $?
close "step schedule at pp 2" "$(losses "$one")" "$(losses "$($mpirun -np 2 "$tessera" train $model $step "$shrink" \
  --pipeline-model-parallel-size 2 2>&1)")"
close "step schedule at dp 2" "$(losses "$one")" "$(losses "$($mpirun -np 2 "$tessera" train $model $step "$shrink" 2>&1)")"
# Stopped after iteration 2 (8 samples) and resumed: the schedule goes on from the samples consumed.
first=$("$tessera" train $model $step "$shrink" --save "$work/step" --exit-interval 2 2>&1)
check "step-schedule run stopped at iteration 2 exits 0: $first" $?
resumed=$("$tessera" train $model $step "$shrink" --load "$work/step" 2>&1)
check "resumed step-schedule run exits 0: $resumed" $?
[ "$(batches "$resumed")" = "8 4 4 4 4 4 " ]
check "the resumed step-schedule run's global batches should be 8 4 4 4 4 4: $(batches "$resumed")" $?
close "resumed in the step schedule" "$(losses "$one" | cut -d' ' -f3-)" "$(losses "$resumed")"
expect_failure "--global-batch-size=8: cannot be combined with --step-batch-size-schedule" "$tessera" train $model \
  --global-batch-size 8 $step "$shrink"
expect_failure "gives a global batch of 3 after 4 consumed samples, which must be divisible by --micro-batch-size=2" \
  "$tessera" train $model --micro-batch-size 2 $step "0:2 64:3 96:4"

finish rampup_batch_size_cli
