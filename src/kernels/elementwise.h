// Element-wise arithmetic on fp32 tensors that the model's residual stream and its loss need,
// dispatched on the tensors' device (kernels/device_dispatch.h; the CPU code is
// kernels/cpu/elementwise.h).
#pragma once

#include "core/tensor.h"

namespace tessera::kernels {

// a[i] += b[i] (the residual connections); the same number of elements.
void add_into(const Tensor& a, const Tensor& b);
// y[r, j] += bias[j] for y [rows, cols] with cols = bias's length (a bias added after a reduction).
void add_bias_rows(const Tensor& y, const Tensor& bias);
// out[i] = scale * x[i].
void scale(const Tensor& x, float scale, const Tensor& out);

}  // namespace tessera::kernels
