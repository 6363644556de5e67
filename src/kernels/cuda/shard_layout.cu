// Shard placement on the GPU (kernels/cuda/shard_layout.h): grid-stride loops over the shard's
// elements, each finding its place in the full tensor as kernels::full_index does on the host
// (kernels/shard_layout.cc). The shards tile the full tensor, so no two threads write one element.
#include <cuda_runtime.h>

#include "core/philox.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/shard_layout.h"

namespace tessera::kernels::cuda {
namespace {

// kernels::full_index: unravel in the shard's view (`length` along dim), shift along dim by `offset`,
// ravel in the full view.
__device__ inline int64_t full_index(const DeviceShardPlace& place, int64_t offset, int64_t local_index) {
  if (place.dim < 0) return local_index;
  int64_t global = 0, stride = 1, rest = local_index;
  for (int d = place.ndim - 1; d >= 0; --d) {
    const int64_t local_extent = d == place.dim ? place.length : place.view[d];
    const int64_t coord = rest % local_extent + (d == place.dim ? offset : 0);
    rest /= local_extent;
    global += coord * stride;
    stride *= place.view[d];
  }
  return global;
}

__global__ void fill_normal_kernel(float* out, int64_t n, float stddev, uint64_t seed, uint64_t stream,
                                   DeviceShardPlace place) {
  const PhiloxStream philox(seed, stream);
  for (int64_t i = grid_index(); i < n; i += grid_stride())
    out[i] = stddev * philox.normal(static_cast<uint64_t>(full_index(place, place.offset, i)));
}

// One thread per element of the count * n shards: shard r = e / n lies at offset r * length.
__global__ void place_shards_kernel(const float* shards, int64_t count, int64_t n, float* full,
                                    DeviceShardPlace place) {
  for (int64_t e = grid_index(); e < count * n; e += grid_stride()) {
    const int64_t r = e / n, i = e % n;
    full[full_index(place, r * place.length, i)] = shards[e];
  }
}

}  // namespace

void fill_normal(float* out, int64_t n, float stddev, uint64_t seed, uint64_t stream, const DeviceShardPlace& place) {
  if (n == 0) return;
  fill_normal_kernel<<<grid_for(n), kThreads, 0, launch_stream()>>>(out, n, stddev, seed, stream, place);
  check_launch("fill_normal");
}

void place_shards(const float* shards, int64_t count, int64_t n, float* full, const DeviceShardPlace& place) {
  if (count * n == 0) return;
  place_shards_kernel<<<grid_for(count * n), kThreads, 0, launch_stream()>>>(shards, count, n, full, place);
  check_launch("place_shards");
}

}  // namespace tessera::kernels::cuda
