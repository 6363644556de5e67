#!/usr/bin/env bash
# Megatron-Core's uneven pipeline split (--decoder-first-pipeline-num-layers, --decoder-last-pipeline-num-layers):
# the logged losses of every split equal the single process's (first only, last only, both, interleaved,
# with tensor parallelism), the log names the layers per stage, the memory report's theory holds, a
# checkpoint saved with an uneven split resumes in one process and the reverse, and the refusals. Megatron-Core's
# counted split too (--account-for-embedding/loss-in-pipeline-split), interleaved and at pp 4.
set -uo pipefail
tessera=${1:?usage: uneven_pipeline_cli.sh path/to/tessera}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
mpirun="mpirun --oversubscribe --allow-run-as-root"

# 64 ids padded to 64 at tp 1 and 2: the same model at every layout.
model="--mock-data --tokenizer-type NullTokenizer --vocab-size 63 --make-vocab-size-divisible-by 32 --num-layers 6
       --hidden-size 32 --num-attention-heads 4 --seq-length 16 --micro-batch-size 1 --global-batch-size 6 --lr 1e-3 --lr-decay-style constant
       --eval-iters 1 --eval-interval 2 --log-interval 1 --hidden-dropout 0.1"
# The training losses, then the validation ones (iterations 2 and 4) and the test one.
losses() { grep -o 'lm loss[ a-z]*: [0-9.E+-]*' <<<"$1" | awk '{print $NF}' | tr '\n' ' '; }
train_losses() { grep ' iteration ' <<<"$1" | grep -o 'lm loss: [0-9.E+-]*' | awk '{print $3}' | tr '\n' ' '; }
close() {
  python3 - "$2" "$3" <<'PY'
import sys
a, b = ([float(x) for x in s.split()] for s in sys.argv[1:3])
sys.exit(0 if len(a) == len(b) and a and all(abs(x - y) <= 1e-5 * abs(x) for x, y in zip(a, b)) else 1)
PY
  check "$1: $3 should be $2" $?
}

single=$("$tessera" train $model --train-iters 4 2>&1)
check "single process exits 0: $single" $?
expected=$(losses "$single")

# uneven "what" ranks "layers per stage" flags...
uneven() {
  local what=$1 ranks=$2 stages=$3 out
  shift 3
  out=$($mpirun -np "$ranks" "$tessera" train $model --train-iters 4 "$@" 2>&1)
  check "$what exits 0: $out" $?
  grep -qF "layers per pipeline stage: $stages (" <<<"$out"
  check "$what: the log names the layers per stage $stages: $(grep 'layers per' <<<"$out")" $?
  grep -o 'activations peak (max over ranks) [0-9.]* (theory [0-9.]*)' <<<"$out" | head -1 | tr -d '()' |
    awk '{exit !($5 == $7)}'
  check "$what: the measured activation peak is the theory's: $(grep -o 'activations peak[^|]*' <<<"$out" | head -1)" $?
  close "$what" "$expected" "$(losses "$out")"
}
uneven "pp 2, first 2" 2 "2 4" --pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 2
uneven "pp 2, last 1" 2 "5 1" --pipeline-model-parallel-size 2 --decoder-last-pipeline-num-layers 1
uneven "pp 3, first 1 last 1" 3 "1 4 1" --pipeline-model-parallel-size 3 --decoder-first-pipeline-num-layers 1 \
  --decoder-last-pipeline-num-layers 1
uneven "pp 2 interleaved, first 2" 2 "2 4" --pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 2 \
  --num-virtual-stages-per-pipeline-rank 2
uneven "tp 2 x pp 2, last 2" 4 "4 2" --tensor-model-parallel-size 2 --sequence-parallel \
  --pipeline-model-parallel-size 2 --decoder-last-pipeline-num-layers 2
# The embedding and the loss counted as layers: 6 + 2 over 2 stages x 2 chunks (model chunks of 1, 2, 2, 1
# layers, each stage's two chunks of different sizes in the memory report's theory), and over 4 stages.
counted="--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split"
uneven "pp 2 interleaved, embedding and loss counted" 2 "3 3" --pipeline-model-parallel-size 2 $counted \
  --num-virtual-stages-per-pipeline-rank 2
uneven "pp 4, embedding and loss counted" 4 "1 2 2 1" --pipeline-model-parallel-size 4 $counted

# Checkpoints name layers globally: an uneven split's resumes in one process, and the reverse.
$mpirun -np 3 "$tessera" train $model --train-iters 2 --pipeline-model-parallel-size 3 \
  --decoder-first-pipeline-num-layers 1 --decoder-last-pipeline-num-layers 1 --save "$work/uneven" >/dev/null 2>&1
check "uneven run saves" $?
after_two=$(train_losses "$single" | cut -d' ' -f3-)  # iterations 3 and 4
resumed=$("$tessera" train $model --train-iters 4 --load "$work/uneven" 2>&1)
close "uneven checkpoint resumed in one process" "$after_two" "$(train_losses "$resumed")"
"$tessera" train $model --train-iters 2 --save "$work/even" >/dev/null 2>&1
resumed=$($mpirun -np 2 "$tessera" train $model --train-iters 4 --load "$work/even" --pipeline-model-parallel-size 2 \
  --decoder-last-pipeline-num-layers 1 2>&1)
close "one process's checkpoint resumed with an uneven split" "$after_two" "$(train_losses "$resumed")"

expect_failure "--decoder-first-pipeline-num-layers=2: an uneven split needs --pipeline-model-parallel-size > 1" \
  "$tessera" train $model --train-iters 1 --decoder-first-pipeline-num-layers 2
expect_failure "--decoder-last-pipeline-num-layers=0: must be positive" \
  "$tessera" train $model --train-iters 1 --decoder-last-pipeline-num-layers 0
expect_failure "leaves 3 of --num-layers=6 for the 2 other pipeline stages, which must split them evenly" \
  $mpirun -np 3 "$tessera" train $model --train-iters 1 --pipeline-model-parallel-size 3 \
  --decoder-first-pipeline-num-layers 3
expect_failure "--num-layers-per-virtual-pipeline-stage=1: cannot be combined with an uneven split" \
  $mpirun -np 2 "$tessera" train $model --train-iters 1 --pipeline-model-parallel-size 2 \
  --decoder-first-pipeline-num-layers 2 --num-layers-per-virtual-pipeline-stage 1
finish uneven_pipeline_cli
