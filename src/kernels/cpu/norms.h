// The CPU implementation of kernels/norms.h, over host buffers: what the tensor-level entry points call
// once the tensors' device is checked, and what the kernel tests exercise directly.
// LayerNorm and RMSNorm over the last dimension of [rows, cols].
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace tessera::kernels::cpu {

// y = (x - mean) * rstd * w + b; saves mean[rows] and rstd[rows] for backward. b may be null.
// round_output: y rounded to this type (mixed precision: y feeds only GEMMs) as each row is written.
void layernorm_forward(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                       int64_t rows, int64_t cols, float eps, DType round_output = DType::F32);
// h += residual, then layernorm_forward of h, row by row in one pass: the residual connection followed
// by the next norm (h then holds the residual stream). The same bits as kernels::add_into then
// layernorm_forward.
void residual_layernorm_forward(float* h, const float* residual, const float* w, const float* b, float* y, float* mean,
                                float* rstd, int64_t rows, int64_t cols, float eps, DType round_output = DType::F32);
// dx is accumulated into (+=, so the residual stream's gradient can be passed in); dw, db are
// accumulated into (db may be null). Deterministic whatever the thread count.
void layernorm_backward(const float* dy, const float* x, const float* w, const float* mean, const float* rstd,
                        float* dx, float* dw, float* db, int64_t rows, int64_t cols);

// y = x * rstd * w with rstd = 1 / sqrt(mean(x^2) + eps); saves rstd[rows].
void rmsnorm_forward(const float* x, const float* w, float* y, float* rstd, int64_t rows, int64_t cols, float eps,
                     DType round_output = DType::F32);
// h += residual, then rmsnorm_forward of h (as residual_layernorm_forward).
void residual_rmsnorm_forward(float* h, const float* residual, const float* w, float* y, float* rstd, int64_t rows,
                              int64_t cols, float eps, DType round_output = DType::F32);
// dx += ..., dw += ... (as for layernorm).
void rmsnorm_backward(const float* dy, const float* x, const float* w, const float* rstd, float* dx, float* dw,
                      int64_t rows, int64_t cols);

}  // namespace tessera::kernels::cpu
