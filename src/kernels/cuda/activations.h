// The CUDA implementation of kernels/activations.h over device pointers (kernels/cuda/pointwise.cu), one
// element per thread with the CPU's per-element math (kernels/math/activations.h). Declared in every
// build, defined only in a CUDA one.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace tessera::kernels::cuda {

void gelu_forward(const float* x, float* y, int64_t n, DType round_output);
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n);
void swiglu_forward(const float* x, float* y, int64_t rows, int64_t width, DType round_output);
void swiglu_backward(const float* x, const float* dy, float* dx, int64_t rows, int64_t width);
void tanh_forward(const float* x, float* y, int64_t n);
void tanh_backward(const float* y, const float* dy, float* dx, int64_t n);

}  // namespace tessera::kernels::cuda
