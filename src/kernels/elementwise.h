// Element-wise arithmetic on fp32 buffers that the model's residual stream and its loss need.
#pragma once

#include <cstdint>

namespace tessera::kernels {

// a[i] += b[i] (the residual connections).
void add_into(float* a, const float* b, int64_t n);
// out[i] = scale * x[i].
void scale(const float* x, float scale, float* out, int64_t n);

}  // namespace tessera::kernels
