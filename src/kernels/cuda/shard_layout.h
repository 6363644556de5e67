// The CUDA implementation of kernels/shard_layout.h over device pointers (kernels/cuda/shard_layout.cu):
// one thread per element of the shard, its place in the full tensor by the index arithmetic of
// kernels::full_index. Declared in every build, defined only in a CUDA one.
#pragma once

#include <cstdint>

namespace tessera::kernels::cuda {

// A ShardPlace (kernels/shard_layout.h) in a fixed-size form a kernel can take by value.
inline constexpr int kMaxShardDims = 8;
struct DeviceShardPlace {
  int ndim = 0;
  int64_t view[kMaxShardDims] = {};
  int dim = -1;
  int64_t offset = 0, length = 0;
};

// out[i] = stddev * Philox normal (seed, stream) of element full_index(place, i), i < n (core/philox.h:
// the same draws as the CPU; Box-Muller's double log and cos are the GPU's, within an ulp of the host's).
void fill_normal(float* out, int64_t n, float stddev, uint64_t seed, uint64_t stream, const DeviceShardPlace& place);
// full[full_index(place at offset r * length, i)] = shards[r * n + i] for r < count, i < n.
void place_shards(const float* shards, int64_t count, int64_t n, float* full, const DeviceShardPlace& place);

}  // namespace tessera::kernels::cuda
