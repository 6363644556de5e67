// The CPU implementation of kernels/elementwise.h, over host buffers: what the tensor-level entry points call
// once the tensors' device is checked, and what the kernel tests exercise directly.
// Element-wise arithmetic on fp32 buffers that the model's residual stream and its loss need.
#pragma once

#include <cstdint>

namespace tessera::kernels::cpu {

// a[i] += b[i] (the residual connections).
void add_into(float* a, const float* b, int64_t n);
// y[r, j] += bias[j] for y [rows, cols] (a bias added after a reduction).
void add_bias_rows(float* y, const float* bias, int64_t rows, int64_t cols);
// out[i] = scale * x[i].
void scale(const float* x, float scale, float* out, int64_t n);

}  // namespace tessera::kernels::cpu
