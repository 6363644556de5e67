// Dropout on tensors with masks from Philox keyed by the element's global coordinates, so the mask is
// the same whatever the parallel layout and is regenerated (not stored) in backward and in
// recomputation. Dispatched on the tensors' device (kernels/device_dispatch.h; the CPU code is
// kernels/cpu/dropout.h, the keying kernels/math/dropout.h).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tessera::kernels {

// A [seq, batch, hidden] activation slice of a global [seq_total, samples, hidden] tensor: local
// element (s, b, h) is global element ((sample_offset + b) * seq_total + seq_offset + s) * hidden + h.
struct DropoutRegion {
  int64_t seq = 0, batch = 0, hidden = 0;
  int64_t seq_offset = 0, seq_total = 0, sample_offset = 0;
};

// y = x * keep / (1 - p), keep = uniform(seed, stream, global index) >= p, over the region's elements.
// y may be x. p == 0 copies.
void dropout_forward(const Tensor& x, const Tensor& y, float p, uint64_t seed, uint64_t stream,
                     const DropoutRegion& r);
// dx = dy * keep / (1 - p) with the same mask. dx may be dy.
void dropout_backward(const Tensor& dy, const Tensor& dx, float p, uint64_t seed, uint64_t stream,
                      const DropoutRegion& r);

}  // namespace tessera::kernels
