#include "kernels/linear.h"

#include "kernels/cpu/linear.h"
#include "kernels/cuda/linear.h"
#include "kernels/device_dispatch.h"
#include "kernels/precision.h"

namespace tessera::kernels {
namespace {

// A tensor made a GEMM input (kernels::gemm_input) as the CUDA code takes it.
cuda::GemmInput device_input(const Tensor& t) { return {t.raw(), t.dtype()}; }

// The CPU multiplies fp32 buffers (oneDNN rounds them to input_type); a 16-bit input, which only a GPU
// reads as it is, is widened for it.
const float* cpu_input(const Tensor& t, Tensor& widened, DType input_type, const char* what) {
  widened = gemm_input(t, input_type, what);
  return widened.f32();
}

}  // namespace

void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y, DType input_type,
                    bool x_rounded, bool w_rounded) {
  const Device d = kernel_device("linear_forward", {&x, &w, &b, &y}, Impl::kCpuAndCuda);
  TESSERA_CHECK(w.ndim() == 2, "linear_forward: weight ", shape_str(w.shape()), " is not [out, in]");
  const int64_t out = w.dim(0), in = w.dim(1), rows = x.numel() / in;
  check_numel("linear_forward", "x", x, rows * in);
  check_numel("linear_forward", "y", y, rows * out);
  if (b.defined()) check_numel("linear_forward", "bias", b, out);
  if constexpr (kWithCuda) {
    if (on_cuda(d)) {
      // Under mixed precision each input is read from a 16-bit buffer: x encoded here once (a weight
      // comes as the parameter set's bf16 copy, already one).
      const Tensor x16 = gemm_input(x, input_type, "linear_forward x");
      const Tensor w16 = gemm_input(w, input_type, "linear_forward w");
      return cuda::linear_forward(device_input(x16), device_input(w16), f32_or_null(b), y.f32(), rows, in, out,
                                  input_type, x_rounded, w_rounded, d.index);
    }
  }
  Tensor xf, wf;
  cpu::linear_forward(cpu_input(x, xf, input_type, "linear_forward x"),
                      cpu_input(w, wf, input_type, "linear_forward w"), f32_or_null(b), y.f32(), rows, in, out,
                      input_type, x_rounded || x.dtype() != DType::F32, w_rounded || w.dtype() != DType::F32);
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
  if constexpr (kWithCuda) {
    if (on_cuda(d)) {
      // dy is encoded once for both products; x only when dW is wanted, w only when dx is; db sums the
      // fp32 dy.
      const bool gemms = dx.defined() || dw.defined();
      const Tensor dy16 = gemms ? gemm_input(dy, input_type, "linear_backward dy") : dy;
      const Tensor x16 = dw.defined() ? gemm_input(x, input_type, "linear_backward x") : x;
      const Tensor w16 = dx.defined() ? gemm_input(w, input_type, "linear_backward w") : w;
      return cuda::linear_backward(dy.f32(), device_input(dy16), device_input(x16), device_input(w16), f32_or_null(dx),
                                   f32_or_null(dw), f32_or_null(db), rows, in, out, input_type, x_rounded, w_rounded,
                                   dy_rounded, d.index);
    }
  }
  Tensor xf, wf;
  cpu::linear_backward(dy.f32(), cpu_input(x, xf, input_type, "linear_backward x"),
                       cpu_input(w, wf, input_type, "linear_backward w"), f32_or_null(dx), f32_or_null(dw),
                       f32_or_null(db), rows, in, out, false, input_type, x_rounded || x.dtype() != DType::F32,
                       w_rounded || w.dtype() != DType::F32, dy_rounded);
}

}  // namespace tessera::kernels
