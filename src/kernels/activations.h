// Pointwise activations of the MLP.
#pragma once

#include <cstdint>

namespace tessera::kernels {

// GELU, tanh approximation (Megatron's bias_gelu / GPT-2):
// y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void gelu_forward(const float* x, float* y, int64_t n);
// dx = dy * gelu'(x) (overwritten). dx may alias dy.
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n);

// SwiGLU as Megatron: x [rows, 2*width] is [gate | up]; y [rows, width] = silu(gate) * up.
void swiglu_forward(const float* x, float* y, int64_t rows, int64_t width);
// dx [rows, 2*width] overwritten.
void swiglu_backward(const float* x, const float* dy, float* dx, int64_t rows, int64_t width);

}  // namespace tessera::kernels
