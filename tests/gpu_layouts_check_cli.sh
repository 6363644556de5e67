#!/usr/bin/env bash
# scripts/gpu_layouts_check.sh --dry-run, on any machine: the plan lists every layout the device check
# runs against the CPU (expert parallelism and token slices among them) and what it does not run, finds
# its programs in a build folder, and fails naming a missing one; distillation's row trains its teacher first.
set -uo pipefail
tessera=${1:?usage: gpu_layouts_check_cli.sh path/to/tessera}
source "$(dirname "$0")/lib/checks.sh"
script=$(dirname "$0")/../scripts/gpu_layouts_check.sh
build=$(dirname "$tessera")
if [ ! -x "$build/comm_nccl_process_group_test" ]; then
  skip "$build has no comm_nccl_process_group_test (a build without CUDA)"
fi
plan=$(OUT=$(mktemp -d) bash "$script" --dry-run "$build" 2>&1)
check "--dry-run on a build folder exits 0: $plan" $?
for layout in "tp2+sp (fp32)" "tp2+sp bf16 (bf16)" "pp2 1F1B (fp32)" "pp2 interleaved (fp32)" \
              "pp2 token slices (fp32)" \
              "dp2 distributed optimizer (fp32)" "cp2 (fp32)" "ep2 (MoE) (fp32)"; do
  grep -qF "  $layout: " <<<"$plan"
  check "the plan runs $layout: $plan" $?
done
grep -qF -- "--device cuda --device-collectives staged, against --device cpu" <<<"$plan"
check "each layout runs staged on the GPU against the CPU: $plan" $?
grep -qF "nccl world size 1: $build/comm_nccl_process_group_test" <<<"$plan"
check "the plan runs NCCL's world-size-1 test: $plan" $?
grep -qF "calibration: $build/bench_collectives --backend nccl at world size 1" <<<"$plan" &&
  grep -qF "calibration: $build/bench_gpu_train --preset gpt2-124M --bf16 --cluster-output step.json" <<<"$plan"
check "the plan measures NCCL at world size 1 and a one-GPU step for the planner: $plan" $?
grep -qF -- "--num-experts 4 --expert-model-parallel-size 2" <<<"$plan" && ! grep -qF "not run: ep2" <<<"$plan"
check "the plan runs expert parallelism (MoE) rather than refusing it: $plan" $?
# Ouroboros on 2 pipeline ranks: K = 3 modules of 1 layer (--num-layers 3 after the small GPT's 4).
grep -qF "  pp2 ouroboros (fp32): " <<<"$plan" &&
  grep -qF -- "--pipeline-schedule ouroboros --ouroboros-warmup-iters 2 --num-layers 3 --device cuda" <<<"$plan" &&
  ! grep -qF "not run: pp2 ouroboros" <<<"$plan"
check "the plan runs Ouroboros (pp2) on the GPU rather than refusing it: $plan" $?
grep -qF -- "--pipeline-model-parallel-size 2 --pipeline-token-slices 8,24,32" <<<"$plan" &&
  ! grep -qF "not run: pp2 token slices" <<<"$plan"
check "the plan runs TeraPipe's token slices across two stages rather than refusing them: $plan" $?
# Distillation (issue 56): tp2+sp with a teacher the script trains on the CPU first, its KD term compared.
grep -qF "  tp2+sp kd (fp32): " <<<"$plan" &&
  grep -qF -- "--sequence-parallel --kd --load-teacher" <<<"$plan" &&
  grep -qF -- "--hidden-size 96 --ffn-hidden-size 160 --train-iters 4 --device cpu --save" <<<"$plan"
check "the plan distils (tp2+sp, --kd) on the GPU from a teacher trained on the CPU: $plan" $?
# Past the deadline nothing starts, yet the table is printed and the check fails: a device run that
# would outlast the device tool's timeout still says what ran.
late=$(OUT=$(mktemp -d) GPU_LAYOUTS_DEADLINE_S=0 bash "$script" "$build" 2>&1)
rc=$?
[ $rc -eq 1 ] && grep -qF "=== gpu_layouts_check summary" <<<"$late" &&
  grep -qE "^cp2 +FAILED +rc gpu 124, cpu 124" <<<"$late" && grep -qF "not run: " <<<"$late" &&
  grep -qF "gpu_layouts_check: FAILED" <<<"$late"
check "past GPU_LAYOUTS_DEADLINE_S nothing runs, the table is printed and the check fails (rc $rc): $late" $?
empty=$(mktemp -d)
missing=$(bash "$script" --dry-run "$empty" 2>&1)
[ $? -eq 1 ] && grep -qF "gpu_layouts_check: missing $empty/tessera" <<<"$missing"
check "a folder without tessera: exit 1 naming it: $missing" $?
rm -rf "$empty"
finish gpu_layouts_check_cli
