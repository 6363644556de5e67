#include "kernels/linear.h"

#include "kernels/cpu/linear.h"
#include "kernels/cuda/linear.h"
#include "kernels/device_dispatch.h"

namespace tessera::kernels {

void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y, DType input_type,
                    bool x_rounded, bool w_rounded) {
  const Device d = kernel_device("linear_forward", {&x, &w, &b, &y}, Impl::kCpuAndCuda);
  TESSERA_CHECK(w.ndim() == 2, "linear_forward: weight ", shape_str(w.shape()), " is not [out, in]");
  const int64_t out = w.dim(0), in = w.dim(1), rows = x.numel() / in;
  check_numel("linear_forward", "x", x, rows * in);
  check_numel("linear_forward", "y", y, rows * out);
  if (b.defined()) check_numel("linear_forward", "bias", b, out);
  if constexpr (kWithCuda)
    if (on_cuda(d))
      return cuda::linear_forward(x.f32(), w.f32(), f32_or_null(b), y.f32(), rows, in, out, input_type, x_rounded,
                                  w_rounded, d.index);
  cpu::linear_forward(x.f32(), w.f32(), f32_or_null(b), y.f32(), rows, in, out, input_type, x_rounded, w_rounded);
}

void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx, const Tensor& dw,
                     const Tensor& db, DType input_type, bool x_rounded, bool w_rounded, bool dy_rounded) {
  const Device d = kernel_device("linear_backward", {&dy, &x, &w, &dx, &dw, &db}, Impl::kCpuAndCuda);
  TESSERA_CHECK(w.ndim() == 2, "linear_backward: weight ", shape_str(w.shape()), " is not [out, in]");
  const int64_t out = w.dim(0), in = w.dim(1), rows = x.numel() / in;
  check_numel("linear_backward", "x", x, rows * in);
  check_numel("linear_backward", "dy", dy, rows * out);
  if (dx.defined()) check_numel("linear_backward", "dx", dx, rows * in);
  if (dw.defined()) check_numel("linear_backward", "dw", dw, out * in);
  if (db.defined()) check_numel("linear_backward", "db", db, out);
  if constexpr (kWithCuda)
    if (on_cuda(d))
      return cuda::linear_backward(dy.f32(), x.f32(), w.f32(), f32_or_null(dx), f32_or_null(dw), f32_or_null(db), rows,
                                   in, out, input_type, x_rounded, w_rounded, dy_rounded, d.index);
  cpu::linear_backward(dy.f32(), x.f32(), w.f32(), f32_or_null(dx), f32_or_null(dw), f32_or_null(db), rows, in, out,
                       false, input_type, x_rounded, w_rounded, dy_rounded);
}

}  // namespace tessera::kernels
