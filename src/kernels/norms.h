// LayerNorm and RMSNorm over the last dimension on tensors: x is [rows, cols] (any shape of rows * cols
// elements, cols = the weight's length). Dispatched on the tensors' device (kernels/device_dispatch.h;
// the CPU code is kernels/cpu/norms.h).
#pragma once

#include "core/tensor.h"

namespace tessera::kernels {

// y = (x - mean) * rstd * w + b; writes mean [rows] and rstd [rows] for backward. b may be undefined.
// round_output: y rounded to this type (mixed precision: y feeds only GEMMs) as each row is written.
// On a GPU y may instead be a 16-bit tensor of type round_output: the rounded values are written as
// their encodings, with no fp32 output (what the GPU's 16-bit GEMM buffers read); the CPU refuses one.
// So for every forward below.
void layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y, const Tensor& mean,
                       const Tensor& rstd, float eps, DType round_output = DType::F32);
// x += residual, then layernorm_forward of x, in one pass over the rows: a residual connection followed by
// the next norm (x then holds the residual stream, y the norm's output). The same bits as add_into(x,
// residual) then layernorm_forward, on the CPU and on the GPU.
void residual_layernorm_forward(const Tensor& x, const Tensor& residual, const Tensor& w, const Tensor& b,
                                const Tensor& y, const Tensor& mean, const Tensor& rstd, float eps,
                                DType round_output = DType::F32);
// dx is accumulated into (+=, so the residual stream's gradient can be passed in); dw and db (may be
// undefined) are accumulated into. Deterministic whatever the thread count.
void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                        const Tensor& dx, const Tensor& dw, const Tensor& db);

// y = x * rstd * w with rstd = 1 / sqrt(mean(x^2) + eps); writes rstd [rows].
void rmsnorm_forward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& rstd, float eps,
                     DType round_output = DType::F32);
// x += residual, then rmsnorm_forward of x (as residual_layernorm_forward).
void residual_rmsnorm_forward(const Tensor& x, const Tensor& residual, const Tensor& w, const Tensor& y,
                              const Tensor& rstd, float eps, DType round_output = DType::F32);
// dx += ..., dw += ... (as for layernorm).
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dx,
                      const Tensor& dw);

}  // namespace tessera::kernels
