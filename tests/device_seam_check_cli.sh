#!/usr/bin/env bash
# The device-seam check (scripts/check_device_seam.py) on this tree: it passes, and on a copy it fails,
# naming the file, the line and what it found, when model code takes a tensor's memory or declares a
# pointer to numbers, or code of another layer (train, ckpt, comm, ..., apps/) takes it with a raw accessor
# rather than a host one; core and kernels, tests and comments are not read.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"
guard="$root/scripts/check_device_seam.py"

out=$(python3 "$guard" "$root" 2>&1)
check "the check passes on this tree: $out" $?
grep -q "^check_device_seam: OK" <<<"$out"
check "the check says OK: $out" $?

# A fresh copy of src/ and apps/, changed by `edit` (a command run in the copy).
copy() {
  rm -rf "$work/tree" && mkdir -p "$work/tree"
  cp -r "$root/src" "$root/apps" "$work/tree/"
  (cd "$work/tree" && eval "$1")
}
expect_check_failure() {
  copy "$1"
  expect_failure "$2" python3 "$guard" "$work/tree"
}
expect_check_pass() {
  copy "$1"
  out=$(python3 "$guard" "$work/tree" 2>&1)
  check "$1 -> expected the check to pass: $out" $?
}

line=$(($(wc -l < "$root/src/model/modules.cc") + 1))
expect_check_failure 'echo "float first(const Tensor& t) { return t.f32()[0]; }" >> src/model/modules.cc' \
  "src/model/modules.cc:$line: float first(const Tensor& t) { return t.f32()[0]; }: model code takes a tensor's memory (.f32())"
expect_check_failure 'echo "void f(const Tensor& t) { auto* p = t.data<float>(); }" >> src/model/mlp.cc' \
  "src/model/mlp.cc:"
expect_check_failure 'echo "const int32_t* ids(const Tensor& t);" >> src/model/gpt_model.h' \
  "src/model/gpt_model.h:"
expect_check_failure 'echo "void g(float *x, int64_t n) { for (int64_t i = 0; i < n; ++i) x[i] = 0; }" >> src/model/lm_head.cc' \
  "model code declares a pointer to numbers (float *)"
# The optimizers and the schedules too (they run on the GPU with the model).
expect_check_failure 'echo "float lr0(const Tensor& t) { return t.f32()[0]; }" >> src/optim/lr_scheduler.cc' \
  "optim code takes a tensor's memory (.f32())"
expect_check_failure 'echo "int first(const Tensor& t) { return t.i32()[0]; }" >> src/pipeline/schedules.h' \
  "pipeline code takes a tensor's memory (.i32())"
# The model's layers take no memory even with the host accessors.
expect_check_failure 'echo "float first(const Tensor& t) { return t.host_f32()[0]; }" >> src/model/modules.cc' \
  "model code takes a tensor's memory (.host_f32()); call a tensor-level kernel"
# The other layers and the commands take a tensor's memory only with the host accessors, which refuse
# a tensor on a device; the kernels (and core) take any device's.
line=$(($(wc -l < "$root/src/train/trainer.cc") + 1))
expect_check_failure 'echo "float first(const Tensor& t) { return t.f32()[0]; }" >> src/train/trainer.cc' \
  "src/train/trainer.cc:$line: float first(const Tensor& t) { return t.f32()[0]; }: train code takes a tensor's memory (.f32()); use the host accessor (.host_f32()"
expect_check_failure 'echo "void* p(const Tensor& t) { return t.raw(); }" >> src/ckpt/safetensors.cc' \
  "ckpt code takes a tensor's memory (.raw()); use the host accessor (.host_raw()"
expect_check_failure 'echo "int64_t n(const Tensor& t) { return t.i64()[0]; }" >> src/comm/process_group.h' \
  "comm code takes a tensor's memory (.i64())"
expect_check_failure 'echo "void f(const Tensor& t) { auto* p = t.data<float>(); }" >> apps/convert_command.cc' \
  "apps/convert_command.cc:"
expect_check_pass 'echo "float first(const Tensor& t) { const float* p = t.host_f32(); return p[0]; }" >> src/infer/generator.cc'
expect_check_pass 'echo "float first(const Tensor& t) { return t.f32()[0]; }" >> src/kernels/embedding.cc'
# The NCCL process group hands a GPU's memory to NCCL (src/comm/cuda/); the rest of comm reads host memory only.
expect_check_pass 'echo "void* p(const Tensor& t) { return t.raw(); }" >> src/comm/cuda/nccl_process_group.cc'
expect_check_failure 'echo "void* p(const Tensor& t) { return t.raw(); }" >> src/comm/staged_process_group.cc' \
  "comm code takes a tensor's memory (.raw())"
# Tests may read tensors; comments are not code.
expect_check_pass 'echo "float first(const Tensor& t) { return t.f32()[0]; }" >> src/model/gpt_model_test.cc'
expect_check_pass 'echo "float first(const Tensor& t) { return t.f32()[0]; }" >> src/train/trainer_test.cc'
expect_check_pass 'echo "// x.f32() is what kernels read, float* p" >> src/model/modules.cc'

finish device_seam_check_cli
