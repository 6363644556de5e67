#include "kernels/norms.h"

#include "kernels/cpu/norms.h"
#include "kernels/cuda/norms.h"
#include "kernels/device_dispatch.h"

namespace tessera::kernels {
namespace {

// rows of x for a norm over w.numel() columns, with every [rows, cols] and [rows] operand checked.
int64_t norm_rows(const char* kernel, const Tensor& x, const Tensor& w, std::initializer_list<const Tensor*> same,
                  std::initializer_list<const Tensor*> per_row) {
  const int64_t cols = w.numel();
  TESSERA_CHECK(cols > 0 && x.numel() % cols == 0, kernel, ": x ", shape_str(x.shape()), " is not rows of ", cols);
  const int64_t rows = x.numel() / cols;
  for (const Tensor* t : same) check_numel(kernel, "an activation", *t, rows * cols);
  for (const Tensor* t : per_row) check_numel(kernel, "a row statistic", *t, rows);
  return rows;
}

// y as the CUDA kernels write it: fp32, or the 16-bit encodings of type round_output. The CPU writes
// fp32 only (its GEMMs read fp32 buffers, kernels::gemm_buffer_type), so a 16-bit y is refused there.
cuda::NormOutput output(const char* kernel, const Tensor& y, DType round_output, bool on_gpu) {
  if (y.dtype() == DType::F32) return {y.f32(), nullptr};
  TESSERA_CHECK(on_gpu && y.dtype() == round_output, kernel, ": a ", dtype_name(y.dtype()),
                " output is written only on a GPU and only rounded to its type (round_output ",
                dtype_name(round_output), "); the CPU writes fp32 values rounded to round_output");
  return {nullptr, static_cast<uint16_t*>(y.raw())};
}

}  // namespace

void layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y, const Tensor& mean,
                       const Tensor& rstd, float eps, DType round_output) {
  const Device d = kernel_device("layernorm_forward", {&x, &w, &b, &y, &mean, &rstd}, Impl::kCpuAndCuda);
  const int64_t rows = norm_rows("layernorm_forward", x, w, {&y}, {&mean, &rstd});
  if (b.defined()) check_numel("layernorm_forward", "bias", b, w.numel());
  if constexpr (kWithCuda)
    if (on_cuda(d))
      return cuda::layernorm_forward(x.f32(), w.f32(), f32_or_null(b),
                                     output("layernorm_forward", y, round_output, true), mean.f32(), rstd.f32(), rows, w.numel(), eps, round_output);
  output("layernorm_forward", y, round_output, false);
  cpu::layernorm_forward(x.f32(), w.f32(), f32_or_null(b), y.f32(), mean.f32(), rstd.f32(), rows, w.numel(), eps,
                         round_output);
}

void residual_layernorm_forward(const Tensor& x, const Tensor& residual, const Tensor& w, const Tensor& b,
                                const Tensor& y, const Tensor& mean, const Tensor& rstd, float eps,
                                DType round_output) {
  const char* kernel = "residual_layernorm_forward";
  const Device d = kernel_device(kernel, {&x, &residual, &w, &b, &y, &mean, &rstd}, Impl::kCpuAndCuda);
  const int64_t rows = norm_rows(kernel, x, w, {&y}, {&mean, &rstd});
  check_numel(kernel, "the residual", residual, x.numel());
  if (b.defined()) check_numel(kernel, "bias", b, w.numel());
  if constexpr (kWithCuda)
    if (on_cuda(d))
      return cuda::residual_layernorm_forward(x.f32(), residual.f32(), w.f32(), f32_or_null(b),
                                              output(kernel, y, round_output, true), mean.f32(),
                                              rstd.f32(), rows, w.numel(), eps, round_output);
  output(kernel, y, round_output, false);
  cpu::residual_layernorm_forward(x.f32(), residual.f32(), w.f32(), f32_or_null(b), y.f32(), mean.f32(), rstd.f32(),
                                  rows, w.numel(), eps, round_output);
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                        const Tensor& dx, const Tensor& dw, const Tensor& db) {
  const Device d = kernel_device("layernorm_backward", {&dy, &x, &w, &mean, &rstd, &dx, &dw, &db}, Impl::kCpuAndCuda);
  const int64_t rows = norm_rows("layernorm_backward", x, w, {&dy, &dx}, {&mean, &rstd});
  check_numel("layernorm_backward", "dw", dw, w.numel());
  if (db.defined()) check_numel("layernorm_backward", "db", db, w.numel());
  if constexpr (kWithCuda)
    if (on_cuda(d))
      return cuda::layernorm_backward(dy.f32(), x.f32(), w.f32(), mean.f32(), rstd.f32(), dx.f32(), dw.f32(),
                                      f32_or_null(db), rows, w.numel());
  cpu::layernorm_backward(dy.f32(), x.f32(), w.f32(), mean.f32(), rstd.f32(), dx.f32(), dw.f32(), f32_or_null(db),
                          rows, w.numel());
}

void rmsnorm_forward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& rstd, float eps,
                     DType round_output) {
  const Device d = kernel_device("rmsnorm_forward", {&x, &w, &y, &rstd}, Impl::kCpuAndCuda);
  const int64_t rows = norm_rows("rmsnorm_forward", x, w, {&y}, {&rstd});
  if constexpr (kWithCuda)
    if (on_cuda(d))
      return cuda::rmsnorm_forward(x.f32(), w.f32(), output("rmsnorm_forward", y, round_output, true), rstd.f32(),
                                   rows, w.numel(), eps, round_output);
  output("rmsnorm_forward", y, round_output, false);
  cpu::rmsnorm_forward(x.f32(), w.f32(), y.f32(), rstd.f32(), rows, w.numel(), eps, round_output);
}

void residual_rmsnorm_forward(const Tensor& x, const Tensor& residual, const Tensor& w, const Tensor& y,
                              const Tensor& rstd, float eps, DType round_output) {
  const char* kernel = "residual_rmsnorm_forward";
  const Device d = kernel_device(kernel, {&x, &residual, &w, &y, &rstd}, Impl::kCpuAndCuda);
  const int64_t rows = norm_rows(kernel, x, w, {&y}, {&rstd});
  check_numel(kernel, "the residual", residual, x.numel());
  if constexpr (kWithCuda)
    if (on_cuda(d))
      return cuda::residual_rmsnorm_forward(x.f32(), residual.f32(), w.f32(), output(kernel, y, round_output, true),
                                            rstd.f32(), rows, w.numel(), eps, round_output);
  output(kernel, y, round_output, false);
  cpu::residual_rmsnorm_forward(x.f32(), residual.f32(), w.f32(), y.f32(), rstd.f32(), rows, w.numel(), eps,
                                round_output);
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dx,
                      const Tensor& dw) {
  const Device d = kernel_device("rmsnorm_backward", {&dy, &x, &w, &rstd, &dx, &dw}, Impl::kCpuAndCuda);
  const int64_t rows = norm_rows("rmsnorm_backward", x, w, {&dy, &dx}, {&rstd});
  check_numel("rmsnorm_backward", "dw", dw, w.numel());
  if constexpr (kWithCuda)
    if (on_cuda(d))
      return cuda::rmsnorm_backward(dy.f32(), x.f32(), w.f32(), rstd.f32(), dx.f32(), dw.f32(), rows, w.numel());
  cpu::rmsnorm_backward(dy.f32(), x.f32(), w.f32(), rstd.f32(), dx.f32(), dw.f32(), rows, w.numel());
}

}  // namespace tessera::kernels
