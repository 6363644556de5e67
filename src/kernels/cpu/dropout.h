// The CPU implementation of kernels/dropout.h, over host buffers: what the tensor-level entry points call
// once the tensors' device is checked, and what the kernel tests exercise directly.
// Dropout with masks from Philox keyed by the element's global coordinates, so the mask is the same
// whatever the parallel layout and is regenerated (not stored) in backward and in recomputation.
#pragma once

#include <cstdint>

#include "kernels/dropout.h"  // DropoutRegion

namespace tessera::kernels::cpu {

// y = x * keep / (1 - p), keep = uniform(seed, stream, global index) >= p. y may alias x. p == 0 copies.
void dropout_forward(const float* x, float* y, float p, uint64_t seed, uint64_t stream, const DropoutRegion& r);
// dx = dy * keep / (1 - p) with the same mask. dx may alias dy.
void dropout_backward(const float* dy, float* dx, float p, uint64_t seed, uint64_t stream, const DropoutRegion& r);

}  // namespace tessera::kernels::cpu
