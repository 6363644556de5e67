#include "kernels/embedding.h"

#include "kernels/cpu/embedding.h"
#include "kernels/cuda/embedding.h"
#include "kernels/device_dispatch.h"

namespace tessera::kernels {
namespace {

// hidden, with every operand's size checked (table: the words' table or its gradient).
int64_t check_embedding(const char* kernel, const Tensor& tokens, const Tensor& positions, const Tensor& table,
                        const Tensor& rows_out, int64_t vocab_begin, int64_t vocab_end) {
  TESSERA_CHECK(table.ndim() == 2 && table.dim(0) == vocab_end - vocab_begin, kernel, ": table ",
                shape_str(table.shape()), " is not [", vocab_end - vocab_begin, ", hidden]");
  const int64_t rows = tokens.numel(), hidden = table.dim(1);
  if (positions.defined()) check_numel(kernel, "positions", positions, rows);
  check_numel(kernel, "the activation", rows_out, rows * hidden);
  return hidden;
}

}  // namespace

void embedding_forward(const Tensor& tokens, const Tensor& positions, const Tensor& wte, const Tensor& wpe,
                       const Tensor& out, int64_t vocab_begin, int64_t vocab_end) {
  const Device d = kernel_device("embedding_forward", {&tokens, &positions, &wte, &wpe, &out}, Impl::kCpuAndCuda);
  const int64_t hidden = check_embedding("embedding_forward", tokens, positions, wte, out, vocab_begin, vocab_end);
  if constexpr (kWithCuda)
    if (on_cuda(d))
      return cuda::embedding_forward(tokens.i32(), i32_or_null(positions), wte.f32(), f32_or_null(wpe), out.f32(),
                                     tokens.numel(), hidden, vocab_begin, vocab_end);
  cpu::embedding_forward(tokens.i32(), i32_or_null(positions), wte.f32(), f32_or_null(wpe), out.f32(), tokens.numel(),
                         hidden, vocab_begin, vocab_end);
}

void embedding_backward(const Tensor& tokens, const Tensor& positions, const Tensor& dout, const Tensor& dwte,
                        const Tensor& dwpe, int64_t vocab_begin, int64_t vocab_end) {
  const Device d = kernel_device("embedding_backward", {&tokens, &positions, &dout, &dwte, &dwpe}, Impl::kCpuAndCuda);
  const int64_t hidden = check_embedding("embedding_backward", tokens, positions, dwte, dout, vocab_begin, vocab_end);
  if constexpr (kWithCuda)
    if (on_cuda(d))
      return cuda::embedding_backward(tokens.i32(), i32_or_null(positions), dout.f32(), dwte.f32(), f32_or_null(dwpe),
                                      tokens.numel(), hidden, vocab_begin, vocab_end);
  cpu::embedding_backward(tokens.i32(), i32_or_null(positions), dout.f32(), dwte.f32(), f32_or_null(dwpe),
                          tokens.numel(), hidden, vocab_begin, vocab_end);
}

}  // namespace tessera::kernels
