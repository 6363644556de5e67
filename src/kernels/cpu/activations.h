// The CPU implementation of kernels/activations.h, over host buffers: what the tensor-level entry points call
// once the tensors' device is checked, and what the kernel tests exercise directly.
// Pointwise activations of the MLP.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace tessera::kernels::cpu {

// GELU, tanh approximation (Megatron's bias_gelu / GPT-2):
// y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// round_output: y rounded to this type (mixed precision: y feeds only a GEMM) as it is written.
void gelu_forward(const float* x, float* y, int64_t n, DType round_output = DType::F32);
// dx = dy * gelu'(x) (overwritten). dx may alias dy.
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n);

// SwiGLU as Megatron: x [rows, 2*width] is [gate | up]; y [rows, width] = silu(gate) * up.
void swiglu_forward(const float* x, float* y, int64_t rows, int64_t width, DType round_output = DType::F32);
// dx [rows, 2*width] overwritten.
void swiglu_backward(const float* x, const float* dy, float* dx, int64_t rows, int64_t width);

// tanh and its gradient from the output: dx = dy * (1 - y^2) (dx may alias dy).
void tanh_forward(const float* x, float* y, int64_t n);
void tanh_backward(const float* y, const float* dy, float* dx, int64_t n);

}  // namespace tessera::kernels::cpu
