// The CPU implementation of kernels/attention_merge.h, over host buffers.
#pragma once

#include <cstdint>

namespace tessera::kernels::cpu {

// out [seq, batch, heads, d], lse [batch, heads, seq]: merged in place with another key block's
// part_out and part_lse (see kernels/attention_merge.h).
void attention_merge_into(float* out, float* lse, const float* part_out, const float* part_lse, int64_t seq,
                          int64_t batch, int64_t heads, int64_t head_dim);

}  // namespace tessera::kernels::cpu
