#!/usr/bin/env bash
# `tessera train --device` as a user meets it: a bad value and what the GPU path does not run yet refused
# by name before any work (on one rank and under mpirun), the start-up line saying which device and why,
# --device cuda on a machine without a usable GPU failing with CUDA's reason, and a CPU run the same with
# the flag as without it. On a machine with a GPU the --device cuda run trains there instead.
set -uo pipefail
tessera=${1:?usage: device_cli.sh path/to/tessera}
source "$(dirname "$0")/lib/checks.sh"
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
mpirun="mpirun --oversubscribe --allow-run-as-root"

model="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data
       --tokenizer-type NullTokenizer --vocab-size 40 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3
       --train-iters 2 --log-interval 1 --eval-iters 0"

expect_error() { expect_failure "$2" "$tessera" train $model $1; }  # expect_error "flags" "text"
expect_error "--device gpu" "--device=gpu: must be cpu, cuda or cuda:N"
expect_error "--device cuda:x" "--device=cuda:x: must be cpu, cuda or cuda:N"
expect_error "--device cuda --pipeline-schedule ouroboros" \
  "--device=cuda: the GPU path runs --pipeline-schedule=ouroboros only unverified (no device run has compared it with the CPU yet: scripts/gpu_layouts_check.sh); set TESSERA_UNVERIFIED_GPU_LAYOUTS=1 to run it anyway; leave --device out or use --device cpu"
expect_error "--device cuda --recompute-granularity full --recompute-method uniform --pipeline-token-slices 2" \
  "--device=cuda: the GPU path runs --pipeline-token-slices=2 only unverified"
expect_failure "--device=cuda: the GPU path runs data parallelism over 2 ranks only unverified (no device run has compared it with the CPU yet: scripts/gpu_layouts_check.sh); set TESSERA_UNVERIFIED_GPU_LAYOUTS=1 to run it anyway" \
  $mpirun -np 2 "$tessera" train $model --device cuda
expect_failure "--device=cuda: the GPU path runs --expert-model-parallel-size=2 only unverified" \
  $mpirun -np 2 "$tessera" train $model --device cuda --num-experts 4 --expert-model-parallel-size 2
expect_error "--device cpu --device-collectives mpi" "--device-collectives=mpi: must be auto, staged or nccl"

# Without the flag: one line on start-up says which device and why.
auto=$("$tessera" train $model 2>&1)
check "a run without --device exits 0: $auto" $?
[ "$(grep -cE '^device: (cpu|cuda:0) \(.+\)$' <<<"$auto")" -eq 1 ]
check "one start-up line 'device: ... (why)': $auto" $?

cuda=$("$tessera" train $model --device cuda 2>&1)
rc=$?
if [ $rc -ne 0 ]; then
  # No usable GPU here: the error names the flag and gives CUDA's reason, which the default run said too.
  reason=$(sed -n 's/.*--device=cuda: no usable GPU: //p' <<<"$cuda" | head -1)
  [ -n "$reason" ]
  check "--device cuda without a GPU: '--device=cuda: no usable GPU: <reason>', got: $cuda" $?
  grep -qxF "device: cpu ($reason)" <<<"$auto"
  check "without --device: 'device: cpu ($reason)', got: $auto" $?
  ! grep -q "iteration " <<<"$cuda"
  check "--device cuda without a GPU trains nothing: $cuda" $?
else
  grep -q "^device: cuda:0 (.*, --device cuda)$" <<<"$cuda"
  check "--device cuda with a GPU: 'device: cuda:0 (NAME, --device cuda)': $cuda" $?
fi

# Without an NVIDIA driver a CUDA build says so in words (it read cudaErrorInsufficientDriver).
if [ ! -e /proc/driver/nvidia/version ] && ! grep -q "built without CUDA" <<<"$auto"; then
  grep -qxF "device: cpu (no CUDA device: no NVIDIA driver on this machine)" <<<"$auto"
  check "no NVIDIA driver: the start-up line says so: $auto" $?
fi

# --device cpu: said so, and the same losses as any CPU run.
cpu=$("$tessera" train $model --device cpu 2>&1)
check "--device cpu exits 0: $cpu" $?
grep -qxF "device: cpu (--device cpu)" <<<"$cpu"
check "'device: cpu (--device cpu)' on start-up: $cpu" $?
if grep -q "^device: cpu " <<<"$auto"; then
  [ "$(grep -o 'lm loss: [^|]*' <<<"$cpu")" = "$(grep -o 'lm loss: [^|]*' <<<"$auto")" ] &&
    [ -n "$(grep -o 'lm loss: [^|]*' <<<"$cpu")" ]
  check "--device cpu trains as the run without the flag: $cpu --- $auto" $?
fi

finish device_cli
