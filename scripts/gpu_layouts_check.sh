#!/usr/bin/env bash
# The device check of issue 56 (several GPUs, step 3): on a machine with one GPU, runs every parallel
# layout the GPU path lifts as two processes sharing that GPU (their collectives staged through pinned
# host memory over MPI: NCCL refuses two ranks on one GPU), each against the same layout on the CPU from
# the same seed, and NCCL's group at world size 1 (comm_nccl_process_group_test); then the planner's
# calibration (issue 56, step 3): bench_collectives --backend nccl at world size 1 (the one GPU: NCCL
# runs, but a bus bandwidth needs two ranks with a GPU each, so none is written), a measured one-GPU step
# (bench_gpu_train --cluster-output) and `tessera plan --cluster` fitted to it; prints one table last.
#   bash scripts/gpu_layouts_check.sh [--dry-run] [--calibration-only] [BUNDLE (build/cuda-bundle, or its .tar.gz)]
# --calibration-only skips the layouts (a device session with little time left). Nothing starts after
# GPU_LAYOUTS_DEADLINE_S seconds (400): what did not fit fails as not run, and the table is still printed.
# BUNDLE is what scripts/build_cuda_bundle.sh makes (bin/tessera, bin/mpirun, bin/orted, the tests,
# lib/ with Open MPI's plugins), or a build folder with tessera in it. From a development machine:
#   scripts/build_cuda_bundle.sh, then the device tool's
#   run(command="bash scripts/gpu_layouts_check.sh", carry=["build/cuda-bundle.tar.gz"], timeout_s=420)
# --dry-run (any machine, no GPU needed): prints the plan and checks that its programs exist; exit 1
# naming what is missing. Results go to $OUT when set (else build/gpu-layouts-check): one log per part.
# Each layout runs under TESSERA_UNVERIFIED_GPU_LAYOUTS=1 (the opt-in until this script has passed) and
# compares every lm_loss and grad_norm of its 10 iterations (metrics.jsonl, full precision) with the CPU
# run's: fp32 within 1e-4 relative (step 1's tolerance for `tessera train`), bf16 within 2e-2. Then
# checkpoints across devices and layouts (scripts/lib/gpu_checkpoint_check.sh). Exits 1 when a part fails.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=lib/gpu_checkpoint_check.sh
source "$root/scripts/lib/gpu_checkpoint_check.sh"
dry_run=0
calibration_only=0
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) dry_run=1; shift ;;
    --calibration-only) calibration_only=1; shift ;;
    *) break ;;
  esac
done
# The whole script stops starting work at this many seconds (GPU_LAYOUTS_DEADLINE_S), so its table is
# printed before the device tool's timeout_s (420) ends it: parts that do not fit fail as not run.
deadline=${GPU_LAYOUTS_DEADLINE_S:-400}
bundle=${1:-$root/build/cuda-bundle}
out=${OUT:-$root/build/gpu-layouts-check}
if [ ! -d "$bundle" ] && [ -f "${bundle%.tar.gz}.tar.gz" ]; then
  packed=${bundle%.tar.gz}.tar.gz
  bundle=${packed%.tar.gz}
  mkdir -p "$bundle" && tar -C "$bundle" -xzf "$packed" || { echo "gpu_layouts_check: cannot unpack $packed" >&2; exit 2; }
fi
bin=$bundle/bin
[ -d "$bin" ] || bin=$bundle  # a build folder
tessera=$bin/tessera
nccl_test=$bin/comm_nccl_process_group_test
bench_collectives=$bin/bench_collectives
bench_gpu_train=$bin/bench_gpu_train
mpirun=$bin/mpirun
[ -x "$mpirun" ] || mpirun=$(command -v mpirun || echo "$bin/mpirun")

# The layouts: name, tessera flags, precision. Two ranks each (dp2: two data-parallel replicas).
layouts=(
  "tp2+sp|--tensor-model-parallel-size 2 --sequence-parallel|fp32"
  "tp2+sp bf16|--tensor-model-parallel-size 2 --sequence-parallel --bf16|bf16"
  "pp2 1F1B|--pipeline-model-parallel-size 2|fp32"
  "pp2 interleaved|--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1|fp32"
  "pp2 token slices|--pipeline-model-parallel-size 2 --pipeline-token-slices 8,24,32|fp32"
  "dp2 distributed optimizer|--use-distributed-optimizer --overlap-grad-reduce|fp32"
  "cp2|--context-parallel-size 2|fp32"
  "ep2 (MoE)|--num-experts 4 --expert-model-parallel-size 2 --moe-router-topk 2 --moe-aux-loss-coeff 0.01|fp32"
  "pp2 ouroboros|--pipeline-model-parallel-size 2 --pipeline-schedule ouroboros --ouroboros-warmup-iters 2 --num-layers 3|fp32"
  "tp2+sp kd|--tensor-model-parallel-size 2 --sequence-parallel --kd --load-teacher $out/kd-teacher --kd-temp 1.5|fp32"
)
# The distillation row's teacher (a wider 2-layer GPT), trained and saved on the CPU before the layouts.
kd_teacher=(--num-layers 2 --hidden-size 96 --ffn-hidden-size 160 --train-iters 4 --device cpu --save "$out/kd-teacher")
# What the GPU path still refuses (the table says so; nothing to run): nothing at present.
refused=()
small_gpt=(train --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64
           --mock-data --tokenizer-type NullTokenizer --vocab-size 128 --micro-batch-size 2 --global-batch-size 8
           --lr 1e-3 --train-iters 10 --log-interval 1 --eval-iters 0 --seed 1234)

missing=()
for f in "$tessera" "$nccl_test" "$mpirun" "$bench_collectives" "$bench_gpu_train"; do [ -x "$f" ] || missing+=("$f"); done
if [ $dry_run -eq 1 ]; then
  echo "gpu_layouts_check plan (bundle $bundle, results in $out, nothing started after ${deadline} s):"
  echo "  nccl world size 1: $nccl_test"
  for l in "${layouts[@]}"; do
    IFS='|' read -r name flags precision <<<"$l"
    echo "  $name ($precision): $mpirun -np 2 $tessera ${small_gpt[*]} $flags --device cuda --device-collectives staged, against --device cpu"
  done
  echo "  kd teacher: $tessera ${small_gpt[*]} ${kd_teacher[*]}, before the layouts"
  for c in "${checkpoint_plan[@]}"; do echo "  ${c%%|*}: ${c#*|}, against a save and resume on the CPU"; done
  for r in "${refused[@]}"; do echo "  not run: $r"; done
  echo "  calibration: $bench_collectives --backend nccl at world size 1 (no bus bandwidth at one rank: none written)"
  echo "  calibration: $bench_gpu_train --preset gpt2-124M --bf16 --cluster-output step.json, then $tessera plan --cluster step.json"
  if [ ${#missing[@]} -gt 0 ]; then
    printf 'gpu_layouts_check: missing %s\n' "${missing[@]}" >&2
    exit 1
  fi
  echo "gpu_layouts_check: plan OK (${#layouts[@]} layouts, every program present)"
  exit 0
fi
[ ${#missing[@]} -eq 0 ] || { printf 'gpu_layouts_check: missing %s\n' "${missing[@]}" >&2; exit 2; }
mkdir -p "$out"
exec > >(tee "$out/log.txt") 2>&1

# The bundle's libraries, the device image's cuBLASLt and NCCL (libnccl.so.2 is found by tessera itself:
# comm/nccl_library.h), and Open MPI from the bundle: OPAL_PREFIX makes mpirun find orted and its plugins.
cuda_libs=$(find /usr/local /opt /usr/lib /usr/lib64 -xdev -name 'libcublasLt.so.1[0-9]*' -printf '%h\n' 2>/dev/null | sort -u | paste -sd: -)
export LD_LIBRARY_PATH="$bundle/lib${cuda_libs:+:$cuda_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ -d "$bundle/lib/openmpi" ]; then
  export OPAL_PREFIX=$bundle OMPI_MCA_mca_base_component_path=$bundle/lib/openmpi PATH=$bin:$PATH
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=2

summary=()
failed=0
row() { summary+=("$(printf '%-30s %-8s %s' "$1" "$2" "$3")"); [ "$2" = OK ] || [ "$2" = "-" ] || failed=1; }
# run NAME SECONDS COMMAND...: the command under a time limit (cut to what is left before the deadline),
# its output in $out/NAME.txt; its status (124 when it timed out or there was no time left to start it).
run() {
  local name=$1 limit=$2 left=$((deadline - SECONDS))
  shift 2
  echo "=== $name"
  if [ $left -lt 10 ]; then
    echo "not run: ${left} s left before the deadline (GPU_LAYOUTS_DEADLINE_S=$deadline)" | tee "$out/$name.txt"
    return 124
  fi
  [ $left -lt "$limit" ] && limit=$left
  timeout "$limit" "$@" > "$out/$name.txt" 2>&1
  local rc=$?
  tail -5 "$out/$name.txt"
  return $rc
}

start=$SECONDS
if run "nccl world size 1" 90 "$nccl_test"; then
  counts=$(grep -hoE '^\[  (PASSED|SKIPPED|FAILED) *\] [0-9]+' "$out/nccl world size 1.txt" | sed -E 's/\[ *([A-Z]+) *\] ([0-9]+)/\2 \1/' | paste -sd' ' -)
  # Every test skipped (no GPU or no libnccl.so.2 found) verifies nothing: a failure on the device machine.
  case "$counts" in
    *[1-9]*" PASSED"*) row "nccl world size 1" OK "$counts" ;;
    *) row "nccl world size 1" FAILED "$counts: nothing ran (log: nccl world size 1.txt says why)" ;;
  esac
else
  row "nccl world size 1" FAILED "rc $? (log: nccl world size 1.txt)"
fi
[ $calibration_only -eq 1 ] && layouts=()
[ ${#layouts[@]} -eq 0 ] || run "kd teacher" 60 "$tessera" "${small_gpt[@]}" "${kd_teacher[@]}"
for l in "${layouts[@]}"; do
  IFS='|' read -r name flags precision <<<"$l"
  tolerance=1e-4
  [ "$precision" = bf16 ] && tolerance=2e-2
  # shellcheck disable=SC2086
  run "$name gpu" 100 env TESSERA_UNVERIFIED_GPU_LAYOUTS=1 "$mpirun" --oversubscribe -np 2 "$tessera" "${small_gpt[@]}" $flags \
    --device cuda --device-collectives staged --log-dir "$out/$name gpu.logs"
  gpu_rc=$?
  # shellcheck disable=SC2086
  run "$name cpu" 100 "$mpirun" --oversubscribe -np 2 "$tessera" "${small_gpt[@]}" $flags --device cpu \
    --log-dir "$out/$name cpu.logs"
  cpu_rc=$?
  if [ $gpu_rc -ne 0 ] || [ $cpu_rc -ne 0 ]; then
    row "$name" FAILED "rc gpu $gpu_rc, cpu $cpu_rc (logs: $name gpu.txt, $name cpu.txt)"
    continue
  fi
  loss=$(worst_of 10 "$(metric "$out/$name gpu.logs" lm_loss)" "$(metric "$out/$name cpu.logs" lm_loss)")
  norm=$(worst_of 10 "$(metric "$out/$name gpu.logs" grad_norm)" "$(metric "$out/$name cpu.logs" grad_norm)")
  kd=0 kd_note=""
  if [[ $flags == *--kd* ]]; then  # distillation: its KD term too
    kd=$(worst_of 10 "$(metric "$out/$name gpu.logs" "kd loss")" "$(metric "$out/$name cpu.logs" "kd loss")")
    kd_note=", kd loss $kd"
  fi
  verdict=$(awk -v a="$loss" -v b="$norm" -v c="$kd" -v t="$tolerance" 'BEGIN {print (a != "missing" && b != "missing" && c != "missing" && a <= t && b <= t && c <= t) ? "OK" : "FAILED"}')
  row "$name" "$verdict" "$precision: loss $loss, grad norm $norm$kd_note (largest relative difference, <= $tolerance)"
done
[ $calibration_only -eq 1 ] || checkpoint_checks
for r in "${refused[@]}"; do row "${r%%:*}" "-" "not run: ${r#*: }"; done

# The planner's calibration. NCCL over this one GPU at world size 1: the path runs, every bus bandwidth but
# a broadcast's is 0 by definition (nothing crosses a link), so no "nccl" object can be measured here.
if run "nccl busbw world size 1" 60 "$bench_collectives" --backend nccl --reps 3 --max-bytes 16777216; then
  row "nccl busbw world size 1" OK "NCCL ran at 1 rank; bus bandwidths need 2+ ranks with a GPU each: none written"
else
  row "nccl busbw world size 1" FAILED "rc $? (log: nccl busbw world size 1.txt)"
fi
# A measured one-GPU step, and the plan of the same run fitted to it (H200 or H100 by the GPU's name).
device=H100-SXM
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && device=H200
if run "one-GPU step" 120 "$bench_gpu_train" --preset gpt2-124M --bf16 --mbs 8 --dropout 0 --warmup 2 --iters 5 \
     --cluster-output "$out/step.json" &&
   run "plan fitted to the step" 60 "$tessera" plan --device "$device" --cluster "$out/step.json" --num-layers 12 \
     --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --max-position-embeddings 1024 --vocab-size 50257 \
     --micro-batch-size 8 --global-batch-size 8 --bf16 --hidden-dropout 0 --attention-dropout 0; then
  measured=$(grep -oE 'ms=[0-9.]+' "$out/one-GPU step.txt" | head -1)
  fitted=$(grep -oE 'GEMM efficiency: [0-9.]+' "$out/plan fitted to the step.txt" | head -1)
  row "plan fitted to the step" OK "$device, gpt2-124M bf16 mbs 8: $measured, $fitted (log: plan fitted to the step.txt)"
else
  row "plan fitted to the step" FAILED "rc $? (logs: one-GPU step.txt, plan fitted to the step.txt)"
fi

echo
echo "=== gpu_layouts_check summary ($(date -u '+%Y-%m-%d %H:%M UTC'), $(hostname), $((SECONDS - start)) s)"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
printf '%s\n' "${summary[@]}"
[ $failed -eq 0 ] && echo "gpu_layouts_check: OK" || echo "gpu_layouts_check: FAILED"
exit $failed
