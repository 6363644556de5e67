#include "kernels/cross_entropy.h"

#include "kernels/cpu/cross_entropy.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/device_dispatch.h"

namespace tessera::kernels {

void cross_entropy_shard_stats(const Tensor& logits, const Tensor& targets, const Tensor& max_out,
                               const Tensor& sumexp_out, const Tensor& target_logit_out, int64_t vocab_begin) {
  const char* kernel = "cross_entropy_shard_stats";
  const Device d = kernel_device(kernel, {&logits, &targets, &max_out, &sumexp_out, &target_logit_out}, Impl::kCpuAndCuda);
  TESSERA_CHECK(logits.ndim() == 2, kernel, ": logits ", shape_str(logits.shape()), " are not [rows, vocab]");
  const int64_t rows = logits.dim(0);
  for (const Tensor* t : {&targets, &max_out, &sumexp_out, &target_logit_out}) check_numel(kernel, "a per-row operand", *t, rows);
  if constexpr (kWithCuda)
    if (on_cuda(d))
      return cuda::cross_entropy_shard_stats(logits.f32(), targets.i32(), max_out.f32(), sumexp_out.f32(),
                                             target_logit_out.f32(), rows, logits.dim(1), vocab_begin);
  cpu::cross_entropy_shard_stats(logits.f32(), targets.i32(), max_out.f32(), sumexp_out.f32(), target_logit_out.f32(),
                                 rows, logits.dim(1), vocab_begin);
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& dloss,
                            int64_t vocab_begin, DType round_output) {
  const char* kernel = "cross_entropy_backward";
  const Device d = kernel_device(kernel, {&logits, &targets, &lse, &dloss}, Impl::kCpuAndCuda);
  TESSERA_CHECK(logits.ndim() == 2, kernel, ": logits ", shape_str(logits.shape()), " are not [rows, vocab]");
  const int64_t rows = logits.dim(0);
  for (const Tensor* t : {&targets, &lse, &dloss}) check_numel(kernel, "a per-row operand", *t, rows);
  if constexpr (kWithCuda)
    if (on_cuda(d))
      return cuda::cross_entropy_backward(logits.f32(), targets.i32(), lse.f32(), dloss.f32(), rows, logits.dim(1),
                                          vocab_begin, round_output);
  cpu::cross_entropy_backward(logits.f32(), targets.i32(), lse.f32(), dloss.f32(), rows, logits.dim(1), vocab_begin,
                              round_output);
}

void cross_entropy_fused(const Tensor& logits, const Tensor& targets, const Tensor& dloss, const Tensor& max_out,
                         const Tensor& sumexp_out, const Tensor& target_logit_out, const Tensor& lse_out,
                         DType round_output) {
  const char* kernel = "cross_entropy_fused";
  const Device d = kernel_device(kernel, {&logits, &targets, &dloss, &max_out, &sumexp_out, &target_logit_out, &lse_out},
                                 Impl::kCpuAndCuda);
  TESSERA_CHECK(logits.ndim() == 2, kernel, ": logits ", shape_str(logits.shape()), " are not [rows, vocab]");
  TESSERA_CHECK(logits.dtype() == DType::F32 || logits.dtype() == DType::BF16, kernel, ": logits are ",
                dtype_name(logits.dtype()), "; fp32 or bf16 expected");
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  for (const Tensor* t : {&targets, &dloss, &max_out, &sumexp_out, &target_logit_out, &lse_out})
    check_numel(kernel, "a per-row operand", *t, rows);
  const bool bf16 = logits.dtype() == DType::BF16;
  if constexpr (kWithCuda)
    if (on_cuda(d)) {
      if (bf16)
        return cuda::cross_entropy_fused(logits.bf16(), targets.i32(), dloss.f32(), max_out.f32(), sumexp_out.f32(),
                                         target_logit_out.f32(), lse_out.f32(), rows, vocab, round_output);
      return cuda::cross_entropy_fused(logits.f32(), targets.i32(), dloss.f32(), max_out.f32(), sumexp_out.f32(),
                                       target_logit_out.f32(), lse_out.f32(), rows, vocab, round_output);
    }
  if (bf16)
    return cpu::cross_entropy_fused(logits.bf16(), targets.i32(), dloss.f32(), max_out.f32(), sumexp_out.f32(),
                                    target_logit_out.f32(), lse_out.f32(), rows, vocab, round_output);
  cpu::cross_entropy_fused(logits.f32(), targets.i32(), dloss.f32(), max_out.f32(), sumexp_out.f32(),
                           target_logit_out.f32(), lse_out.f32(), rows, vocab, round_output);
}

}  // namespace tessera::kernels
