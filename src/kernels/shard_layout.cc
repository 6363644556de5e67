#include "kernels/shard_layout.h"

#include "kernels/cpu/shard_layout.h"
#include "kernels/cuda/shard_layout.h"
#include "kernels/device_dispatch.h"

namespace tessera::kernels {
namespace {

// The place in the fixed-size form the CUDA kernels take (unused in a CPU-only build).
[[maybe_unused]] cuda::DeviceShardPlace device_place(const char* kernel, const ShardPlace& place) {
  const bool fits = place.dim < 0 || place.view.size() <= static_cast<size_t>(cuda::kMaxShardDims);
  TESSERA_CHECK(fits, kernel, ": a view of ", place.view.size(), " dimensions (at most ", cuda::kMaxShardDims,
                " on CUDA)");
  cuda::DeviceShardPlace p;
  if (place.dim >= 0) {
    p.ndim = static_cast<int>(place.view.size());
    for (int d = 0; d < p.ndim; ++d) p.view[d] = place.view[d];
  }
  p.dim = place.dim, p.offset = place.offset, p.length = place.length;
  return p;
}

}  // namespace

int64_t full_index(const ShardPlace& place, int64_t local_index) {
  if (place.dim < 0) return local_index;
  // Unravel in the shard's view (view with `length` along dim), shift along dim, ravel in the full view.
  int64_t global = 0, stride = 1, rest = local_index;
  for (int d = static_cast<int>(place.view.size()) - 1; d >= 0; --d) {
    const int64_t local_extent = d == place.dim ? place.length : place.view[d];
    const int64_t coord = rest % local_extent + (d == place.dim ? place.offset : 0);
    rest /= local_extent;
    global += coord * stride;
    stride *= place.view[d];
  }
  return global;
}

void fill_normal(const Tensor& out, float stddev, uint64_t seed, uint64_t stream, const ShardPlace& place) {
  const Device d = kernel_device("fill_normal", {&out}, Impl::kCpuAndCuda);
  if constexpr (kWithCuda)
    if (on_cuda(d))
      return cuda::fill_normal(out.f32(), out.numel(), stddev, seed, stream, device_place("fill_normal", place));
  cpu::fill_normal(out.f32(), out.numel(), stddev, seed, stream, place);
}

void place_shards(const Tensor& shards, int64_t count, const Tensor& full, const ShardPlace& place) {
  const Device d = kernel_device("place_shards", {&shards, &full}, Impl::kCpuAndCuda);
  TESSERA_CHECK(count > 0 && shards.numel() % count == 0 && shards.numel() == full.numel(), "place_shards: ",
                count, " shards of ", shards.numel(), " elements in all do not make a tensor of ", full.numel());
  TESSERA_CHECK(place.dim < 0 || (place.dim < static_cast<int>(place.view.size()) &&
                                   count * place.length == place.view[place.dim]),
                "place_shards: ", count, " shards of length ", place.length, " do not tile dimension ", place.dim,
                " of ", shape_str(place.view));
  if constexpr (kWithCuda)
    if (on_cuda(d))
      return cuda::place_shards(shards.f32(), count, shards.numel() / count, full.f32(),
                                device_place("place_shards", place));
  cpu::place_shards(shards.f32(), count, shards.numel() / count, full.f32(), place);
}

}  // namespace tessera::kernels
