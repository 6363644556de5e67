// The CPU implementation of kernels/shard_layout.h, over host buffers.
#pragma once

#include <cstdint>

#include "kernels/shard_layout.h"  // ShardPlace

namespace tessera::kernels::cpu {

// out[i] = stddev * normal(seed, stream, full_index(place, i)) for i < n.
void fill_normal(float* out, int64_t n, float stddev, uint64_t seed, uint64_t stream, const ShardPlace& place);
// full[full_index(place at offset r * length, i)] = shards[r * n + i] for r < count, i < n.
void place_shards(const float* shards, int64_t count, int64_t n, float* full, const ShardPlace& place);

}  // namespace tessera::kernels::cpu
