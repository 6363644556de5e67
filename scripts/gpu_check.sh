#!/usr/bin/env bash
# The device check (issue 39): on a machine with a GPU, runs the CUDA tests that
# scripts/build_cuda_bundle.sh built here (each compares a CUDA kernel with its CPU kernel), then the
# same under compute-sanitizer's memcheck where it is installed, and prints a summary table last (the
# end of the output is what comes back from the device machine). Results go to $OUT (gtest XML, log).
#   bash scripts/gpu_check.sh [BUNDLE (build/cuda-bundle, or build/cuda-bundle.tar.gz when that is absent)]
# From a development machine: scripts/build_cuda_bundle.sh, then the device tool's
#   run(command="bash scripts/gpu_check.sh", carry=["build/cuda-bundle.tar.gz"], timeout_s=480).
# Where a bundle built here does not run there, the fallback builds it on the GPU machine first:
# scripts/pack_device_deps.sh here, then
#   run(command="bash scripts/build_on_device.sh && bash scripts/gpu_check.sh", carry=["build/device-deps.tar.gz"]).
# Without a GPU every device test reports itself skipped with CUDA's reason, and the summary says so.
# Exits 1 when a test fails or a step times out.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/lib/device_check.sh"
out=${OUT:-$root/build/gpu-check}
mkdir -p "$out"
use_bundle "${1:-$root/build/cuda-bundle}"
exec > >(tee "$out/log.txt") 2>&1

# The bundle's libraries, then the device image's cuBLASLt (and cuDNN, NCCL), wherever the image keeps them.
find_device_libraries
export LD_LIBRARY_PATH=$tessera_library_path

if command -v nvidia-smi >/dev/null; then
  step nvidia-smi 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
else
  echo "=== nvidia-smi: not installed (no NVIDIA driver here)"
fi
run_bundle_tests 180
# Training steps of GPT-2 124M on the GPU: tokens/s and MFU (bench/gpu_train.cc), fp32 and bf16.
if [ -x "$bundle/bin/bench_gpu_train" ]; then
  step "bench_gpu_train gpt2-124M fp32" 150 "$bundle/bin/bench_gpu_train" --preset gpt2-124M --mbs 8 --iters 10
  step "bench_gpu_train gpt2-124M bf16" 150 "$bundle/bin/bench_gpu_train" --preset gpt2-124M --bf16 --mbs 8 --iters 10
  # The other attention kernel set (kernels/cuda/attention.h) on the same step, for the speed-up.
  step "bench_gpu_train gpt2-124M bf16 rows" 150 env TESSERA_CUDA_ATTENTION=rows "$bundle/bin/bench_gpu_train" --preset gpt2-124M --bf16 --mbs 8 --iters 10
fi
# `tessera train` itself, 20 iterations of a small GPT on the GPU and on the CPU from the same seed:
# every logged loss within 1e-4 relative (scripts/lib/device_check.sh).
if [ -x "$bundle/bin/tessera" ] && command -v nvidia-smi >/dev/null; then
  train_on_gpu_and_cpu
fi
# GPU_CHECK_MEMCHECK=0 leaves memcheck out (a quick rerun after a fix).
if [ "${GPU_CHECK_MEMCHECK:-1}" != 0 ] && command -v compute-sanitizer >/dev/null && command -v nvidia-smi >/dev/null; then
  for test in "$bundle"/bin/*_test; do
    step "memcheck $(basename "$test")" 180 compute-sanitizer --tool memcheck --error-exitcode 9 "$test"
  done
  # The tiled attention kernels share K/V tiles in shared memory: racecheck finds a missing barrier.
  attention_test=$(ls "$bundle"/bin/*cuda_attention_test 2>/dev/null | head -1)
  [ -n "$attention_test" ] && step "racecheck $(basename "$attention_test") tiled" 240 \
    compute-sanitizer --tool racecheck --error-exitcode 9 "$attention_test" --gtest_filter='*tiled*'
fi

echo
echo "=== gpu_check summary ($(date -u '+%Y-%m-%d %H:%M UTC'), $(hostname))"
printf '%s\n' "${summary[@]}"
grep -h -A1 '^model ' "$out"/bench_gpu_train*.txt 2>/dev/null | grep -v '^--'
if grep -qh 'no CUDA device' "$out"/*.txt 2>/dev/null; then
  echo "no GPU here: the device tests were skipped ($(grep -hom1 'no CUDA device[^$]*' "$out"/*.txt | head -1))"
fi
[ $failed -eq 0 ] && echo "gpu_check: OK" || echo "gpu_check: FAILED"
exit $failed
