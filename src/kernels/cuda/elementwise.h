// The CUDA implementation of kernels/elementwise.h over device pointers (kernels/cuda/pointwise.cu):
// what the tensor entry points call for tensors on a CUDA device (kernels/device_dispatch.h). Declared
// in every build, defined only in a CUDA one.
#pragma once

#include <cstdint>

namespace tessera::kernels::cuda {

void add_into(float* a, const float* b, int64_t n);
void add_bias_rows(float* y, const float* bias, int64_t rows, int64_t cols);
void scale(const float* x, float scale, float* out, int64_t n);
// x[0, n) = value (Tensor::fill_ on a GPU, through the device's allocator).
void fill(float* x, float value, int64_t n);

}  // namespace tessera::kernels::cuda
