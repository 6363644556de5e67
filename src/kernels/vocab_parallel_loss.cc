#include "kernels/vocab_parallel_loss.h"

#include <cstring>

#include "kernels/cpu/vocab_parallel_loss.h"
#include "kernels/cuda/vocab_parallel_loss.h"
#include "kernels/device_dispatch.h"
#include "kernels/tensor_ops.h"

namespace tessera::kernels {

void rescale_sum_exp(const Tensor& sumexp, const Tensor& max, const Tensor& global_max) {
  const Device d = kernel_device("rescale_sum_exp", {&sumexp, &max, &global_max}, Impl::kCpuAndCuda);
  const int64_t rows = sumexp.numel();
  check_numel("rescale_sum_exp", "max", max, rows);
  check_numel("rescale_sum_exp", "global_max", global_max, rows);
  if constexpr (kWithCuda)
    if (on_cuda(d)) return cuda::rescale_sum_exp(sumexp.f32(), max.f32(), global_max.f32(), rows);
  cpu::rescale_sum_exp(sumexp.f32(), max.f32(), global_max.f32(), rows);
}

double masked_loss_sum(const Tensor& max, const Tensor& sumexp, const Tensor& target, const Tensor& loss_mask,
                       const Tensor& lse) {
  const Device d = kernel_device("masked_loss_sum", {&max, &sumexp, &target, &loss_mask, &lse}, Impl::kCpuAndCuda);
  const int64_t rows = max.numel();
  for (const Tensor* t : {&sumexp, &target, &loss_mask, &lse}) check_numel("masked_loss_sum", "a per-row operand", *t, rows);
  if constexpr (kWithCuda)
    if (on_cuda(d))
      return cuda::masked_loss_sum(max.f32(), sumexp.f32(), target.f32(), loss_mask.f32(), lse.f32(), rows, d.index);
  return cpu::masked_loss_sum(max.f32(), sumexp.f32(), target.f32(), loss_mask.f32(), lse.f32(), rows);
}

namespace {
void check_total(const char* kernel, const Tensor& total) {
  TESSERA_CHECK(total.dtype() == DType::I64 && total.numel() == 1, kernel, ": the total is ", dtype_name(total.dtype()),
                " ", shape_str(total.shape()), ", not a loss total (int64 [1], from loss_total)");
}
}  // namespace

void masked_loss_sum_into(const Tensor& max, const Tensor& sumexp, const Tensor& target, const Tensor& loss_mask,
                          const Tensor& lse, const Tensor& total) {
  const Device d =
      kernel_device("masked_loss_sum_into", {&max, &sumexp, &target, &loss_mask, &lse, &total}, Impl::kCpuAndCuda);
  check_total("masked_loss_sum_into", total);
  const int64_t rows = max.numel();
  for (const Tensor* t : {&sumexp, &target, &loss_mask, &lse})
    check_numel("masked_loss_sum_into", "a per-row operand", *t, rows);
  if constexpr (kWithCuda)
    if (on_cuda(d))
      return cuda::masked_loss_sum_into(max.f32(), sumexp.f32(), target.f32(), loss_mask.f32(), lse.f32(), rows,
                                        reinterpret_cast<double*>(total.i64()));
  double sum = 0;
  std::memcpy(&sum, total.i64(), sizeof sum);
  sum += cpu::masked_loss_sum(max.f32(), sumexp.f32(), target.f32(), loss_mask.f32(), lse.f32(), rows);
  std::memcpy(total.i64(), &sum, sizeof sum);
}

Tensor loss_total(Device device) { return Tensor::zeros({1}, DType::I64, device); }  // all bits 0: +0.0

double loss_total_value(const Tensor& total) {
  check_total("loss_total_value", total);
  const Tensor host = to_device(total, Device::cpu());
  double v = 0;
  std::memcpy(&v, host.host_raw(), sizeof v);
  return v;
}

Tensor loss_totals(int64_t n, Device device) {
  TESSERA_CHECK(n >= 1, "loss_totals: ", n, " totals");
  return Tensor::zeros({n}, DType::I64, device);
}

std::vector<double> loss_totals_values(const Tensor& totals, int64_t n) {
  TESSERA_CHECK(totals.dtype() == DType::I64 && totals.ndim() == 1 && n >= 0 && n <= totals.numel(),
                "loss_totals_values: ", n, " totals of ", dtype_name(totals.dtype()), " ",
                shape_str(totals.shape()), ", not loss totals (int64 [n], from loss_totals)");
  std::vector<double> v(static_cast<size_t>(n));
  if (n == 0) return v;
  const Tensor host = to_device(totals.narrow(0, n), Device::cpu());
  std::memcpy(v.data(), host.host_raw(), v.size() * sizeof(double));
  return v;
}

void shard_argmax(const Tensor& logits, const Tensor& best, int64_t vocab_begin) {
  const Device d = kernel_device("shard_argmax", {&logits, &best}, Impl::kCpuAndCuda);
  TESSERA_CHECK(logits.ndim() == 2, "shard_argmax: logits ", shape_str(logits.shape()), " are not [rows, vocab]");
  check_numel("shard_argmax", "best", best, 2 * logits.dim(0));
  if constexpr (kWithCuda)
    if (on_cuda(d)) return cuda::shard_argmax(logits.f32(), best.f32(), logits.dim(0), logits.dim(1), vocab_begin);
  cpu::shard_argmax(logits.f32(), best.f32(), logits.dim(0), logits.dim(1), vocab_begin);
}

void pick_scores(const Tensor& best, const Tensor& target, const Tensor& lse, const Tensor& out) {
  const Device d = kernel_device("pick_scores", {&best, &target, &lse, &out}, Impl::kCpuAndCuda);
  const int64_t rows = target.numel();
  TESSERA_CHECK(best.ndim() == 2 && best.dim(1) == 2 * rows, "pick_scores: best ", shape_str(best.shape()),
                " is not [shards, 2 * ", rows, "]");
  check_numel("pick_scores", "lse", lse, rows);
  check_numel("pick_scores", "out", out, 3 * rows);
  if constexpr (kWithCuda)
    if (on_cuda(d)) return cuda::pick_scores(best.f32(), best.dim(0), target.f32(), lse.f32(), out.f32(), rows);
  cpu::pick_scores(best.f32(), best.dim(0), target.f32(), lse.f32(), out.f32(), rows);
}

}  // namespace tessera::kernels
