#!/usr/bin/env bash
# `tessera train --bf16/--fp16` as a user runs it: the precision flags validated before any work, the
# start-up line saying what is 16-bit, fp16's loss scale backing off from 2^32 in the log line (skips
# counted, not as NaN iterations), and 16-bit runs under tensor, sequence, pipeline and data parallelism
# (with recomputation and the distributed optimizer) tracking the single-process 16-bit run.
set -uo pipefail
tessera=${1:?usage: mixed_precision_cli.sh path/to/tessera}
source "$(dirname "$0")/lib/checks.sh"
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
mpirun="mpirun --oversubscribe --allow-run-as-root"

model="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data
       --tokenizer-type NullTokenizer --vocab-size 40 --micro-batch-size 2 --global-batch-size 4 --lr 3e-3
       --train-iters 30 --log-interval 10 --eval-iters 0 --hidden-dropout 0 --attention-dropout 0
       --make-vocab-size-divisible-by 64"

expect_error() { expect_failure "$2" "$tessera" train $1; }  # expect_error "flags" "text of the message"

expect_error "$model --bf16 --fp16" "--bf16=true: cannot be combined with --fp16"
expect_error "$model --loss-scale 128" "--loss-scale=128: needs --fp16 or --bf16"
expect_error "$model --fp16 --loss-scale -1" "--loss-scale=-1: must be >= 0 (0: dynamic)"
expect_error "$model --fp16 --initial-loss-scale 0" "--initial-loss-scale=0: must be positive"
expect_error "$model --fp16 --initial-loss-scale 1024 --min-loss-scale 2048" \
  "--min-loss-scale=2048: must be in (0, --initial-loss-scale=1024]"
expect_error "$model --fp16 --loss-scale-window 0" "--loss-scale-window=0: must be positive"
expect_error "$model --fp16 --hysteresis 0" "--hysteresis=0: must be positive"

last_loss() { grep -oE "lm loss: [0-9.E+-]+" <<<"$1" | tail -1 | grep -oE "[0-9.E+-]+$"; }
close() {  # close A B RELATIVE: |A - B| <= RELATIVE * |B|
  awk -v a="$1" -v b="$2" -v r="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; if (b < 0) b = -b; exit !(a != "" && d <= r * b) }'
}

bf16=$("$tessera" train $model --bf16 2>&1)
check "bf16 run exits 0: $bf16" $?
grep -qF " > mixed precision: bf16 GEMM inputs with fp32 accumulation" <<<"$bf16"
check "a bf16 run says what is 16-bit: $bf16" $?
grep -qE "accumulation \(CPU features: [a-z0-9_ ]+; (native: oneDNN bf16 kernels|.*so rounded to bf16 on the fp32 kernels)\)" <<<"$bf16"
check "a bf16 run names the CPU features and the GEMM path: $bf16" $?
# On the fp32 kernels the weights are kept rounded, and the memory report counts them.
if grep -qF "so rounded to bf16 on the fp32 kernels" <<<"$bf16"; then
  grep -qE "GEMM weights rounded to bf16 once per step \(fp32 copies\): [0-9.]+ MB" <<<"$bf16"
  check "the memory report counts the rounded weight copies: $bf16" $?
fi
grep -qF "loss scale: 1.0 |" <<<"$bf16"
check "bf16 trains without loss scaling: $bf16" $?

fp16=$("$tessera" train $model --fp16 --hysteresis 1 --max-nan-iterations 1 2>&1)
check "fp16 run from Megatron's initial scale 2^32 exits 0: $fp16" $?
grep -qF "dynamic loss scale from 4294967296.0 (min 1.0, window 1000, hysteresis 1)" <<<"$fp16"
check "an fp16 run names its loss scaling: $fp16" $?
grep -qF "iteration 1: gradients overflowed at loss scale 4294967296.0; the update was skipped and the loss scale is now 2147483648.0" <<<"$fp16"
check "the first fp16 iteration overflows at 2^32 and halves the scale: $fp16" $?
# As Megatron's, the log line counts skipped iterations per interval.
skipped=$(grep -oE "number of skipped iterations: +[0-9]+" <<<"$fp16" | grep -oE "[0-9]+$" | awk '{ s += $1 } END { print s }')
scale=$(grep -oE "loss scale: [0-9.]+" <<<"$fp16" | tail -1 | grep -oE "[0-9.]+$")
awk -v s="$skipped" -v l="$scale" 'BEGIN { exit !(s > 0 && s < 30 && l == 2 ^ (32 - s)) }'
check "the log line counts $skipped skipped iterations and the scale $scale is 2^(32 - skipped)" $?
grep -qE "number of nan iterations: +0 \|" <<<"$fp16" && ! grep -q "WARNING" <<<"$fp16"
check "overflows are not NaN iterations: $fp16" $?

# 16-bit training under parallel layouts tracks the single-process 16-bit run (the same padded
# vocabulary of 64 at tp2: 32 x 2; only the order of fp32 sums differs).
fp16_fixed=$("$tessera" train $model --fp16 --initial-loss-scale 1024 2>&1)
check "fp16 run at scale 1024 exits 0" $?
for layout in "--bf16 --tensor-model-parallel-size 2 --sequence-parallel --make-vocab-size-divisible-by 32" \
              "--bf16 --pipeline-model-parallel-size 2 --recompute-granularity full --recompute-method uniform" \
              "--fp16 --initial-loss-scale 1024 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather"; do
  reference=$bf16
  [[ $layout == --fp16* ]] && reference=$fp16_fixed
  out=$($mpirun -np 2 "$tessera" train $model $layout 2>&1)
  check "mpirun -np 2 tessera train $layout exits 0: $out" $?
  close "$(last_loss "$out")" "$(last_loss "$reference")" 0.001
  ok=$?; check "$layout: final loss $(last_loss "$out") should be within 0.1% of one process's $(last_loss "$reference")" $ok
done

finish mixed_precision_cli
