// The CPU implementation of kernels/grouped_linear.h over host buffers: one pointer per group's weight
// (and bias, and gradient), so that the layers may lie anywhere; evenly spaced ones make one batched GEMM.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace tessera::kernels::cpu {

// b empty: no bias.
void grouped_linear_forward(const float* x, const std::vector<const float*>& w, const std::vector<const float*>& b,
                            float* y, int64_t rows, int64_t in, int64_t out, DType input_type = DType::F32,
                            bool x_rounded = false);
// dx null, dw or db empty: not wanted.
void grouped_linear_backward(const float* dy, const float* x, const std::vector<const float*>& w, float* dx,
                             const std::vector<float*>& dw, const std::vector<float*>& db, int64_t rows, int64_t in,
                             int64_t out, DType input_type = DType::F32, bool x_rounded = false,
                             bool dy_rounded = false);

// x [sum counts, d] -> padded [counts.size(), rows, d] with zero rows after each group's, and back.
void pad_row_groups(const float* x, const std::vector<int64_t>& counts, int64_t rows, int64_t d, float* padded);
void unpad_row_groups(const float* padded, const std::vector<int64_t>& counts, int64_t rows, int64_t d, float* out);

}  // namespace tessera::kernels::cpu
