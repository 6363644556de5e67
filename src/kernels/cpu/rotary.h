// The CPU implementation of kernels/rotary.h, over host buffers: what the tensor-level entry points call
// once the tensors' device is checked, and what the kernel tests exercise directly.
// Rotary position embedding (Su et al.), Megatron's non-interleaved ("rotate_half") form:
// for each head vector x of size head_dim, with half = rot_dim/2 and inv_freq[i] = base^(-2i/rot_dim),
// angle = position * inv_freq[i]:
//   y[i]        = x[i] cos(angle) - x[i + half] sin(angle)
//   y[i + half] = x[i + half] cos(angle) + x[i] sin(angle)       for i < half,
// and dimensions rot_dim..head_dim-1 pass through unchanged (--rotary-percent < 1).
#pragma once

#include <cstdint>

#include "kernels/math/rotary.h"

namespace tessera::kernels::cpu {

// x is [rows, heads, head_dim] contiguous; rotated in place. positions[rows].
void rope_forward(float* x, const int32_t* positions, int64_t rows, int64_t heads, int64_t head_dim,
                  int64_t rot_dim, float base, const math::RopeScaling& scaling = {});
// In-place gradient: applies the inverse (transposed) rotation to dx.
void rope_backward(float* dx, const int32_t* positions, int64_t rows, int64_t heads, int64_t head_dim,
                   int64_t rot_dim, float base, const math::RopeScaling& scaling = {});

}  // namespace tessera::kernels::cpu
