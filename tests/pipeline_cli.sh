#!/usr/bin/env bash
# `tessera train` with pipeline parallelism as a user runs it under mpirun: layout errors before any
# work, the 1F1B and interleaved schedules giving the single-process losses, and the pipeline lines of
# the log (timers, measured bubble beside the theory, activations held per stage and their bytes beside
# the prediction), under 1F1B, interleaving and the zero-bubble schedules.
set -uo pipefail
tessera=${1:?usage: pipeline_cli.sh path/to/tessera}
source "$(dirname "$0")/lib/checks.sh"
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
mpirun="mpirun --oversubscribe --allow-run-as-root"

model="--num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data
       --tokenizer-type NullTokenizer --vocab-size 40 --micro-batch-size 1 --global-batch-size 4 --lr 1e-3
       --train-iters 4 --log-interval 2 --eval-iters 1 --eval-interval 4"

expect_error() { expect_failure "$3" $mpirun -np "$1" "$tessera" train $2; }  # expect_error RANKS "flags" "text"

expect_error 2 "$model --pipeline-model-parallel-size 3" "--num-layers=4: must be divisible by --pipeline-model-parallel-size=3"
expect_error 2 "$model --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 3" \
  "--num-layers-per-virtual-pipeline-stage=3: must divide the 2 layers of each pipeline stage"
expect_error 2 "$model --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 --global-batch-size 3" \
  "the interleaved schedule needs a multiple of --pipeline-model-parallel-size=2"
expect_error 2 "$model --pipeline-model-parallel-size 4" "must divide the number of ranks (2)"

losses() { grep -oE "lm loss: [0-9.E+-]+|lm loss value: [0-9.E+-]+" <<<"$1" | tr '\n' ' '; }
single=$("$tessera" train $model 2>&1)
check "single-process run exits 0: $single" $?
for layout in "--pipeline-model-parallel-size 2" "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1"; do
  out=$($mpirun -np 2 "$tessera" train $model $layout 2>&1)
  check "$layout exits 0: $out" $?
  got=$(losses "$out")
  want=$(losses "$single")
  [ -n "$want" ] && [ "$got" = "$want" ]
  check "$layout losses '$got' should equal the single process's '$want'" $?
  grep -qE "pipeline bubble: measured [0-9.]+, theory \(p-1\)/\(v\*m\) = 0\.[0-9]+" <<<"$out"
  check "$layout should log the measured and theoretical bubble" $?
  grep -qE "timers \(ms per iteration, min and max over ranks\): forward-compute \([0-9.]+, [0-9.]+\)" <<<"$out"
  check "$layout should log the per-rank timers: $out" $?
done
# 1F1B on 2 stages with 4 micro-batches: stage 0 holds 2 micro-batches at once, stage 1 one.
out=$($mpirun -np 2 "$tessera" train $model --pipeline-model-parallel-size 2 2>&1)
grep -qF "activations held per stage (measured/schedule max): 2/2 1/1" <<<"$out"
check "1F1B should hold 2 and 1 micro-batches on its stages: $out" $?
# Each stage's activation bytes: what the records held at most, beside the prediction from the op list.
grep -qE "activation MB per stage \(measured/predicted\): ([0-9.]+)/\1 ([0-9.]+)/\2$" <<<"$out"
check "1F1B's measured activation bytes per stage should equal the prediction: $out" $?
# Zero bubble: a (micro-batch, chunk) is held from its F to its W, so every stage reaches the schedule's
# bound, min(p, m) per chunk (counting to B instead, the last stage would show 1 under ZB-H1).
for zb in "--enable-zero-bubble|2/2 2/2" "--zero-bubble-v-schedule|4/4 4/4"; do
  out=$($mpirun -np 2 "$tessera" train $model --pipeline-model-parallel-size 2 ${zb%%|*} 2>&1)
  grep -qE "pipeline bubble: measured [0-9.]+, theory \(zero bubble, simulated at F = B = W\) = 0\.[0-9]+" <<<"$out"
  check "${zb%%|*} should log the measured bubble beside the simulated one: $out" $?
  grep -qF "activations held per stage (measured/schedule max): ${zb#*|} |" <<<"$out"
  check "${zb%%|*} should hold ${zb#*|} (F to W) on its stages: $out" $?
done

# An Ouroboros checkpoint is one layout's delayed state (on P ranks without Megatron's model files): at
# another pipeline size it is refused by flag before any tensor is read, not as a missing tensor.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ouroboros="$model --num-layers 3 --pipeline-schedule ouroboros --train-iters 2 --eval-iters 0"
out=$($mpirun -np 2 "$tessera" train $ouroboros --pipeline-model-parallel-size 2 --save "$work/ring" --save-interval 1 \
      --exit-interval 1 2>&1)
check "an Ouroboros run on 2 ranks saves: $out" $?
expect_failure "the Ouroboros checkpoint was saved at --pipeline-model-parallel-size=2, this run has --pipeline-model-parallel-size=1" \
  "$tessera" train $ouroboros --ouroboros-modules 3 --load "$work/ring"

finish pipeline_cli
