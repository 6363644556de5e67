// Dropout with masks from Philox keyed by the element's global coordinates, so the mask is the same
// whatever the parallel layout and is regenerated (not stored) in backward and in recomputation.
#pragma once

#include <cstdint>

namespace tessera::kernels {

// A [seq, batch, hidden] activation slice of a global [seq_total, samples, hidden] tensor: local
// element (s, b, h) is global element ((sample_offset + b) * seq_total + seq_offset + s) * hidden + h.
struct DropoutRegion {
  int64_t seq = 0, batch = 0, hidden = 0;
  int64_t seq_offset = 0, seq_total = 0, sample_offset = 0;
};

// y = x * keep / (1 - p), keep = uniform(seed, stream, global index) >= p. y may alias x. p == 0 copies.
void dropout_forward(const float* x, float* y, float p, uint64_t seed, uint64_t stream, const DropoutRegion& r);
// dx = dy * keep / (1 - p) with the same mask. dx may alias dy.
void dropout_backward(const float* dy, float* dx, float p, uint64_t seed, uint64_t stream, const DropoutRegion& r);

}  // namespace tessera::kernels
