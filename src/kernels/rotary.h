// Rotary position embedding (Su et al.) on tensors, Megatron's non-interleaved ("rotate_half") form:
// each head vector's first rot_dim dimensions are rotated by position * base^(-2i/rot_dim), the rest
// pass through (--rotary-percent < 1); kernels/cpu/rotary.h has the formula. Dispatched on the
// tensors' device (kernels/device_dispatch.h).
#pragma once

#include "core/tensor.h"
#include "kernels/math/rotary.h"

namespace tessera::kernels {

// x [rows, heads, head_dim] rotated in place; positions [rows] int32.
void rope_forward(const Tensor& x, const Tensor& positions, int64_t rot_dim, float base,
                  const math::RopeScaling& scaling = {});
// In-place gradient: applies the inverse (transposed) rotation to dx [rows, heads, head_dim].
void rope_backward(const Tensor& dx, const Tensor& positions, int64_t rot_dim, float base,
                  const math::RopeScaling& scaling = {});

}  // namespace tessera::kernels
