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
bundle=${1:-$root/build/cuda-bundle}
out=${OUT:-$root/build/gpu-check}
mkdir -p "$out"
# The packed bundle (what the device tool carries) is unpacked beside it.
if [ ! -d "$bundle" ] && [ -f "${bundle%.tar.gz}.tar.gz" ]; then
  packed=${bundle%.tar.gz}.tar.gz
  bundle=${packed%.tar.gz}
  mkdir -p "$bundle" && tar -C "$bundle" -xzf "$packed" || { echo "gpu_check: cannot unpack $packed" >&2; exit 2; }
fi
[ -d "$bundle/bin" ] || { echo "gpu_check: no bundle at $bundle (scripts/build_cuda_bundle.sh builds it)" >&2; exit 2; }
exec > >(tee "$out/log.txt") 2>&1

# The bundle's libraries, then the device image's cuBLASLt (and later NCCL), wherever the image keeps them.
cuda_libs=$(find /usr/local /opt /usr/lib /usr/lib64 -xdev -name 'libcublasLt.so.1[0-9]*' -printf '%h\n' 2>/dev/null | sort -u | paste -sd: -)
export LD_LIBRARY_PATH="$bundle/lib${cuda_libs:+:$cuda_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

summary=()
failed=0
# step NAME SECONDS COMMAND...: runs it under a time limit and records its status and counts.
step() {
  local name=$1 limit=$2 start=$SECONDS
  shift 2
  echo "=== $name"
  timeout "$limit" "$@" > "$out/$name.txt" 2>&1
  local rc=$?
  cat "$out/$name.txt"
  local counts
  counts=$(grep -hoE '^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]+ tests?' "$out/$name.txt" | sed -E 's/\[ *([A-Z]+) *\] ([0-9]+).*/\2 \1/' | paste -sd' ' -)
  [ $rc -eq 0 ] || failed=1
  [ $rc -eq 124 ] && counts="timed out after ${limit}s"
  summary+=("$(printf '%-40s rc=%-3s %4ss  %s' "$name" "$rc" $((SECONDS - start)) "${counts:-}")")
}

if command -v nvidia-smi >/dev/null; then
  step nvidia-smi 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
else
  echo "=== nvidia-smi: not installed (no NVIDIA driver here)"
fi
for test in "$bundle"/bin/*_test; do
  name=$(basename "$test")
  step "$name" 180 "$test" --gtest_output="xml:$out/$name.xml"
done
# Training steps of GPT-2 124M on the GPU: tokens/s and MFU (bench/gpu_train.cc), fp32 and bf16.
if [ -x "$bundle/bin/bench_gpu_train" ]; then
  step "bench_gpu_train gpt2-124M fp32" 150 "$bundle/bin/bench_gpu_train" --preset gpt2-124M --mbs 8 --iters 10
  step "bench_gpu_train gpt2-124M bf16" 150 "$bundle/bin/bench_gpu_train" --preset gpt2-124M --bf16 --mbs 8 --iters 10
  # The other attention kernel set (kernels/cuda/attention.h) on the same step, for the speed-up.
  step "bench_gpu_train gpt2-124M bf16 rows" 150 env TESSERA_CUDA_ATTENTION=rows "$bundle/bin/bench_gpu_train" --preset gpt2-124M --bf16 --mbs 8 --iters 10
fi
# `tessera train` itself, 20 iterations of a small GPT on the GPU and on the CPU from the same seed:
# every logged loss within 1e-4 relative. tessera runs as an isolated MPI singleton (no mpirun, no
# daemon) with the bundle's Open MPI plugins.
if [ -x "$bundle/bin/tessera" ] && command -v nvidia-smi >/dev/null; then
  export OMPI_MCA_mca_base_component_path="$bundle/lib/openmpi" OMPI_MCA_ess_singleton_isolated=1
  small_gpt=(train --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --mock-data
             --tokenizer-type NullTokenizer --vocab-size 100 --micro-batch-size 4 --global-batch-size 8
             --lr 1e-3 --train-iters 20 --log-interval 1 --eval-iters 0 --seed 1234)
  pushd "$out" >/dev/null
  step "tessera train --device cuda" 120 "$bundle/bin/tessera" "${small_gpt[@]}" --device cuda
  step "tessera train --device cpu" 120 "$bundle/bin/tessera" "${small_gpt[@]}" --device cpu
  popd >/dev/null
  losses() { grep -oE 'lm loss: [0-9.E+-]+' "$out/tessera train --device $1.txt" | awk '{print $3}'; }
  worst=$(paste <(losses cuda) <(losses cpu) | awk 'BEGIN {w = -1} NF == 2 {n++; d = ($1 - $2) / $2; if (d < 0) d = -d; if (d > w) w = d} END {print (n == 20 ? w : "missing")}')
  verdict=$(awk -v w="$worst" 'BEGIN {print (w != "missing" && w <= 1e-4) ? "OK" : "FAILED"}')
  [ "$verdict" = OK ] || failed=1
  summary+=("$(printf '%-40s %s' "train losses, GPU against CPU" "largest relative difference $worst over 20 iterations: $verdict")")
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
