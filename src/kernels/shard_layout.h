// Elements of a tensor-parallel shard by their place in the full tensor: how a parameter is
// initialised so that a shard equals the slice of the single-process tensor, and how the shards of a
// parameter are put back together. Dispatched on the tensors' device (kernels/device_dispatch.h; the
// CPU code is kernels/cpu/shard_layout.h, the CUDA code kernels/cuda/shard_layout.h).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tessera::kernels {

// Where a shard lies in the full tensor: the full tensor seen as `view` (row-major; e.g. [2, F, H] for
// a SwiGLU fc1 weight of [2F, H], so that a shard of both halves is one range), the shard holding
// [offset, offset + length) along dimension `dim`. dim < 0: the whole tensor.
struct ShardPlace {
  std::vector<int64_t> view;
  int dim = -1;
  int64_t offset = 0, length = 0;
};

// The flat index in the full tensor of element `local_index` of the shard.
int64_t full_index(const ShardPlace& place, int64_t local_index);

// out[i] = stddev * Philox normal (seed, stream) of element full_index(place, i): the value element i has
// in the full tensor, whatever the split.
void fill_normal(const Tensor& out, float stddev, uint64_t seed, uint64_t stream, const ShardPlace& place);

// full (fp32) from `shards` consecutive shards of n = shards.numel() / count elements each, shard r
// lying at offset r * place.length along place.dim (place.offset is ignored): every element put in
// its place, as a gathered parameter is reassembled.
void place_shards(const Tensor& shards, int64_t count, const Tensor& full, const ShardPlace& place);

}  // namespace tessera::kernels
