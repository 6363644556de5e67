// The MLP's pointwise activations on tensors, dispatched on the tensors' device
// (kernels/device_dispatch.h; the CPU code is kernels/cpu/activations.h, the per-element math
// kernels/math/activations.h).
#pragma once

#include "core/tensor.h"

namespace tessera::kernels {

// GELU, tanh approximation (Megatron's bias_gelu / GPT-2): y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
// elementwise over x and y of the same number of elements. round_output: y rounded to this type (mixed
// precision: y feeds only a GEMM) as it is written.
void gelu_forward(const Tensor& x, const Tensor& y, DType round_output = DType::F32);
// dx = dy * gelu'(x) (overwritten). dx may be dy.
void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx);

// SwiGLU as Megatron: x [rows, 2 * width] is [gate | up]; y [rows, width] = silu(gate) * up, width being
// y's last dimension.
void swiglu_forward(const Tensor& x, const Tensor& y, DType round_output = DType::F32);
// dy [rows, width] -> dx [rows, 2 * width] (overwritten).
void swiglu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx);

// tanh (BERT's pooler): y = tanh(x), elementwise.
void tanh_forward(const Tensor& x, const Tensor& y);
// dx = dy * (1 - y^2) from the forward's output y (overwritten). dx may be dy.
void tanh_backward(const Tensor& y, const Tensor& dy, const Tensor& dx);

}  // namespace tessera::kernels
