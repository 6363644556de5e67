// The CPU implementation of kernels/linear.h, over host buffers: what the tensor-level entry points call
// once the tensors' device is checked, and what the kernel tests exercise directly.
// Linear layer y = x W^T + b (weights stored [out, in] as in Megatron and PyTorch), on top of the GEMM
// interface. Rows of x are tokens.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace tessera::kernels::cpu {

// input_type: the GEMM inputs' precision (GemmArgs::input_type); the bias is added in fp32.
// x_rounded, w_rounded: x (w) already holds values of input_type (GemmArgs::a_rounded).
// x [rows, in], w [out, in], b [out] or null -> y [rows, out] (overwritten).
void linear_forward(const float* x, const float* w, const float* b, float* y, int64_t rows, int64_t in,
                    int64_t out, DType input_type = DType::F32, bool x_rounded = false, bool w_rounded = false);
// dy [rows, out]. dx [rows, in] is overwritten (or accumulated into when accumulate_dx), dw [out, in]
// and db [out] are accumulated into (gradient accumulation over micro-batches). Any of dx/dw/db may be null.
// dy_rounded: dy already holds values of input_type (the output layer's dlogits, rounded as they are
// made), so it is not rounded again for the two GEMMs.
void linear_backward(const float* dy, const float* x, const float* w, float* dx, float* dw, float* db,
                     int64_t rows, int64_t in, int64_t out, bool accumulate_dx = false,
                     DType input_type = DType::F32, bool x_rounded = false, bool w_rounded = false,
                     bool dy_rounded = false);
// db [out] += the column sums of dy [rows, out] in kernels/math/column_sums.h's fixed order (deterministic,
// and the GPU's order: the same bits).
void linear_bias_grad(const float* dy, float* db, int64_t rows, int64_t out);

}  // namespace tessera::kernels::cpu
