// The linear layer's products on CUDA devices (kernels/cuda/linear.h): the GemmArgs of the CPU path
// (kernels/cpu/linear.cc) on the device's kernel stream, where the other CUDA kernels run, so the
// backend's GEMMs and those kernels are ordered without synchronising. cuBLASLt rounds fp32 inputs to
// input_type itself (its fast-16-bit compute types), so dy is not rounded into a copy as on the CPU.
#include "kernels/cuda/linear.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_runtime.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gemm_cublaslt.h"
#include "kernels/gemm.h"
#include "kernels/linear_gemms.h"

namespace tessera::kernels::cuda {
namespace {

// Makes `device` current (the bias-gradient kernel launches there; a missing GPU is an Error naming the
// kernel) and registers the cuBLASLt backend, once per process: the first CUDA linear layer loads
// libcublasLt, which a CPU run never does.
void start(const char* kernel, int device) {
  tessera::cuda::check(cudaSetDevice(device), kernel);
  static const bool registered = (tessera::cuda::register_gemm_backend(), true);
  (void)registered;
}

// GemmArgs on `device`'s kernel stream.
GemmArgs device_gemm(int device) {
  GemmArgs g;
  g.stream = Stream{Device{DeviceType::CUDA, device}, tessera::cuda::kernel_stream(device)};
  return g;
}

}  // namespace

void linear_forward(const float* x, const float* w, const float* b, float* y, int64_t rows, int64_t in, int64_t out,
                    DType input_type, bool x_rounded, bool w_rounded, int device) {
  start("linear_forward", device);
  GemmArgs g = linear_y_gemm(device_gemm(device), x, w, y, rows, in, out, input_type);
  // cuBLASLt's bias epilogue may run a kernel that needs a 16-byte aligned bias (its alignment
  // preferences cover the matrices only), and a bias viewed in a flat parameter buffer need not be one:
  // such a bias is added after the product instead, the same fp32 sum of the same fp32 product.
  const bool fused_bias = b != nullptr && reinterpret_cast<uintptr_t>(b) % 16 == 0;
  g.bias = fused_bias ? b : nullptr;
  g.a_rounded = x_rounded, g.b_rounded = w_rounded;
  gemm(g);
  if (b != nullptr && !fused_bias && rows > 0) add_bias_rows(y, b, rows, out);
}

void linear_backward(const float* dy, const float* x, const float* w, float* dx, float* dw, float* db, int64_t rows,
                     int64_t in, int64_t out, DType input_type, bool x_rounded, bool w_rounded, bool dy_rounded,
                     int device) {
  start("linear_backward", device);
  if (db) linear_bias_grad(dy, db, rows, out);  // sums the unrounded dy, as the CPU
  if (dx && rows > 0 && in > 0) {  // dx = dy w
    if (out == 0) {  // an empty product: the backend takes no k = 0, and dx is overwritten
      tessera::cuda::check(cudaMemsetAsync(dx, 0, static_cast<size_t>(rows * in) * sizeof(float),
                                           static_cast<cudaStream_t>(tessera::cuda::kernel_stream(device))),
                           "linear_backward");
    } else {
      GemmArgs g = linear_dx_gemm(device_gemm(device), dy, w, dx, rows, in, out, input_type);
      g.a_rounded = dy_rounded, g.b_rounded = w_rounded;
      gemm(g);
    }
  }
  if (dw && rows > 0) {  // dw += dy^T x (no rows: nothing to add)
    GemmArgs g = linear_dw_gemm(device_gemm(device), dy, x, dw, rows, in, out, input_type);
    g.a_rounded = dy_rounded, g.b_rounded = x_rounded;
    gemm(g);
  }
}

}  // namespace tessera::kernels::cuda
