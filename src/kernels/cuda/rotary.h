// The CUDA implementation of kernels/rotary.h over device pointers (kernels/cuda/pointwise.cu): one
// rotated pair per thread, the CPU's per-pair math (kernels/math/rotary.h: angles and cos/sin in
// double). Declared in every build, defined only in a CUDA one.
#pragma once

#include <cstdint>

#include "kernels/math/rotary.h"

namespace tessera::kernels::cuda {

// x [rows, heads, head_dim] rotated in place; positions [rows] int32.
void rope_forward(float* x, const int32_t* positions, int64_t rows, int64_t heads, int64_t head_dim,
                  int64_t rot_dim, float base, const math::RopeScaling& scaling = {});
void rope_backward(float* dx, const int32_t* positions, int64_t rows, int64_t heads, int64_t head_dim,
                   int64_t rot_dim, float base, const math::RopeScaling& scaling = {});

}  // namespace tessera::kernels::cuda
