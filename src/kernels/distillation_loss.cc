#include "kernels/distillation_loss.h"

#include "kernels/cpu/distillation_loss.h"
#include "kernels/cuda/distillation_loss.h"
#include "kernels/device_dispatch.h"

namespace tessera::kernels {
namespace {

// student and teacher logits of the same [rows, vocab] shape.
void check_logits(const char* kernel, const Tensor& student, const Tensor& teacher) {
  TESSERA_CHECK(student.ndim() == 2, kernel, ": logits ", shape_str(student.shape()), " are not [rows, vocab]");
  TESSERA_CHECK(teacher.shape() == student.shape(), kernel, ": the teacher's logits ", shape_str(teacher.shape()),
                " are not shaped as the student's ", shape_str(student.shape()));
}

}  // namespace

void distillation_shard_stats(const Tensor& student, const Tensor& teacher, float temperature, const Tensor& stats) {
  const char* kernel = "distillation_shard_stats";
  const Device d = kernel_device(kernel, {&student, &teacher, &stats}, Impl::kCpuAndCuda);
  check_logits(kernel, student, teacher);
  check_numel(kernel, "stats", stats, kDistillationStats * student.dim(0));
  if constexpr (kWithCuda)
    if (on_cuda(d))
      return cuda::distillation_shard_stats(student.f32(), teacher.f32(), temperature, stats.f32(), student.dim(0),
                                            student.dim(1));
  cpu::distillation_shard_stats(student.f32(), teacher.f32(), temperature, stats.f32(), student.dim(0),
                                student.dim(1));
}

double distillation_kl_sum(const Tensor& stats, const Tensor& loss_mask, const Tensor& kd_lse) {
  const char* kernel = "distillation_kl_sum";
  const Device d = kernel_device(kernel, {&stats, &loss_mask, &kd_lse}, Impl::kCpuAndCuda);
  const int64_t rows = loss_mask.numel();
  check_numel(kernel, "stats", stats, kDistillationStats * rows);
  check_numel(kernel, "kd_lse", kd_lse, 2 * rows);
  if constexpr (kWithCuda)
    if (on_cuda(d)) return cuda::distillation_kl_sum(stats.f32(), loss_mask.f32(), kd_lse.f32(), rows, d.index);
  return cpu::distillation_kl_sum(stats.f32(), loss_mask.f32(), kd_lse.f32(), rows);
}

void distillation_backward(const Tensor& logits, const Tensor& teacher, const Tensor& targets, const Tensor& lse,
                           const Tensor& dce, const Tensor& kd_lse, const Tensor& dkd, float temperature,
                           int64_t vocab_begin, DType round_output) {
  const char* kernel = "distillation_backward";
  const Device d = kernel_device(kernel, {&logits, &teacher, &targets, &lse, &dce, &kd_lse, &dkd}, Impl::kCpuAndCuda);
  check_logits(kernel, logits, teacher);
  const int64_t rows = logits.dim(0);
  for (const Tensor* t : {&targets, &lse, &dce, &dkd}) check_numel(kernel, "a per-row operand", *t, rows);
  check_numel(kernel, "kd_lse", kd_lse, 2 * rows);
  if constexpr (kWithCuda)
    if (on_cuda(d))
      return cuda::distillation_backward(logits.f32(), teacher.f32(), targets.i32(), lse.f32(), dce.f32(),
                                         kd_lse.f32(), dkd.f32(), temperature, rows, logits.dim(1), vocab_begin,
                                         round_output);
  cpu::distillation_backward(logits.f32(), teacher.f32(), targets.i32(), lse.f32(), dce.f32(), kd_lse.f32(),
                             dkd.f32(), temperature, rows, logits.dim(1), vocab_begin, round_output);
}

}  // namespace tessera::kernels
