// The linear layer's products on CUDA devices (kernels/cuda/linear.h): the GemmArgs of the CPU path
// (kernels/cpu/linear.cc) on the device's kernel stream, where the other CUDA kernels run, so the
// backend's GEMMs and those kernels are ordered without synchronising. The inputs come as the tensor
// entry point (kernels/linear.cc) made them: 16-bit buffers under mixed precision (bf16 x bf16 with
// fp32 accumulation and fp32 output: CUBLAS_COMPUTE_32F over CUDA_R_16BF A and B, CUDA_R_32F C and D),
// or fp32 buffers that cuBLASLt rounds to input_type itself (its fast-16-bit compute types).
#include "kernels/cuda/linear.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "core/check.h"
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

const float* as_f32(GemmInput in) { return static_cast<const float*>(in.data); }

// A and B of `g` as the device holds them: both fp32 (cuBLASLt rounds them to input_type) or both
// 16-bit buffers of input_type, which hold that type's values and so are rounded already.
void set_inputs(GemmArgs& g, GemmInput a, GemmInput b, bool a_rounded, bool b_rounded, const char* kernel) {
  TESSERA_CHECK(a.type == b.type, kernel, " on CUDA: GEMM inputs of types ", dtype_name(a.type), " and ",
                dtype_name(b.type), " (both fp32 or both 16-bit)");
  if (a.type != DType::F32)
    TESSERA_CHECK(a.type == g.input_type, kernel, " on CUDA: ", dtype_name(a.type), " GEMM inputs multiplied as ",
                  dtype_name(g.input_type), " (a 16-bit input must be of the input type)");
  g.a_type = a.type, g.b_type = b.type;
  const bool sixteen = a.type != DType::F32;
  g.a_rounded = a_rounded || sixteen, g.b_rounded = b_rounded || sixteen;
}

}  // namespace

void linear_forward(GemmInput x, GemmInput w, const float* b, float* y, int64_t rows, int64_t in, int64_t out,
                    DType input_type, bool x_rounded, bool w_rounded, int device) {
  start("linear_forward", device);
  GemmArgs g = linear_y_gemm(device_gemm(device), as_f32(x), as_f32(w), y, rows, in, out, input_type);
  set_inputs(g, x, w, x_rounded, w_rounded, "linear_forward");
  // cuBLASLt's bias epilogue may run a kernel that needs a 16-byte aligned bias (its alignment
  // preferences cover the matrices only), and a bias viewed in a flat parameter buffer need not be one:
  // such a bias is added after the product instead, the same fp32 sum of the same fp32 product.
  const bool fused_bias = b != nullptr && reinterpret_cast<uintptr_t>(b) % 16 == 0;
  g.bias = fused_bias ? b : nullptr;
  gemm(g);
  if (b != nullptr && !fused_bias && rows > 0) add_bias_rows(y, b, rows, out);
}

void linear_backward(const float* dy_f32, GemmInput dy, GemmInput x, GemmInput w, float* dx, float* dw, float* db,
                     int64_t rows, int64_t in, int64_t out, DType input_type, bool x_rounded, bool w_rounded,
                     bool dy_rounded, int device) {
  start("linear_backward", device);
  if (db) linear_bias_grad(dy_f32, db, rows, out);  // sums the unrounded dy, as the CPU
  if (dx && rows > 0 && in > 0) {  // dx = dy w
    if (out == 0) {  // an empty product: the backend takes no k = 0, and dx is overwritten
      tessera::cuda::check(cudaMemsetAsync(dx, 0, static_cast<size_t>(rows * in) * sizeof(float),
                                           static_cast<cudaStream_t>(tessera::cuda::kernel_stream(device))),
                           "linear_backward");
    } else {
      GemmArgs g = linear_dx_gemm(device_gemm(device), as_f32(dy), as_f32(w), dx, rows, in, out, input_type);
      set_inputs(g, dy, w, dy_rounded, w_rounded, "linear_backward");
      gemm(g);
    }
  }
  if (dw && rows > 0) {  // dw += dy^T x (no rows: nothing to add)
    GemmArgs g = linear_dw_gemm(device_gemm(device), as_f32(dy), as_f32(x), dw, rows, in, out, input_type);
    set_inputs(g, dy, x, dy_rounded, x_rounded, "linear_backward");
    gemm(g);
  }
}

}  // namespace tessera::kernels::cuda
