// The CUDA implementation of kernels/norms.h over device pointers (kernels/cuda/norms.cu): forward one
// block per row with the row statistics in double, as the CPU; backward one block per chunk of rows, the
// weight gradients summed over rows in the CPU's fixed order (deterministic, the same bits). Declared in
// every build, defined only in a CUDA one.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace tessera::kernels::cuda {

// Where a forward writes y: fp32 values (rounded to round_output), or, for a 16-bit round_output, only
// their 16-bit encodings (what a GEMM on 16-bit buffers reads: no fp32 copy is made). One is set.
struct NormOutput {
  float* f32 = nullptr;
  uint16_t* encoded = nullptr;
};

void layernorm_forward(const float* x, const float* w, const float* b, NormOutput y, float* mean, float* rstd,
                       int64_t rows, int64_t cols, float eps, DType round_output);
// x += residual, then layernorm_forward of x, in one kernel (kernels/norms.h).
void residual_layernorm_forward(float* x, const float* residual, const float* w, const float* b, NormOutput y,
                                float* mean, float* rstd, int64_t rows, int64_t cols, float eps, DType round_output);
// dx, dw and db (b may be null) are accumulated into, as on the CPU: one kernel over chunks of rows
// computes dx and the chunks' partial weight gradients, a second adds the partials up.
void layernorm_backward(const float* dy, const float* x, const float* w, const float* mean, const float* rstd,
                        float* dx, float* dw, float* db, int64_t rows, int64_t cols);
void rmsnorm_forward(const float* x, const float* w, NormOutput y, float* rstd, int64_t rows, int64_t cols, float eps,
                     DType round_output);
void residual_rmsnorm_forward(float* x, const float* residual, const float* w, NormOutput y, float* rstd, int64_t rows,
                              int64_t cols, float eps, DType round_output);
void rmsnorm_backward(const float* dy, const float* x, const float* w, const float* rstd, float* dx, float* dw,
                      int64_t rows, int64_t cols);

}  // namespace tessera::kernels::cuda
