#!/usr/bin/env bash
# The device-seam check (scripts/check_device_seam.py) on this tree: it passes, and on a copy it fails,
# naming the file, the line and what it found, when model code takes a tensor's memory or declares a
# pointer to numbers; tests and comments are not read.
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

# A fresh copy of src/model, changed by `edit` (a command run in the copy).
copy() {
  rm -rf "$work/tree" && mkdir -p "$work/tree/src"
  cp -r "$root/src/model" "$root/src/optim" "$root/src/pipeline" "$work/tree/src/"
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
# Tests may read tensors; comments are not code.
expect_check_pass 'echo "float first(const Tensor& t) { return t.f32()[0]; }" >> src/model/gpt_model_test.cc'
expect_check_pass 'echo "// x.f32() is what kernels read, float* p" >> src/model/modules.cc'

finish device_seam_check_cli
