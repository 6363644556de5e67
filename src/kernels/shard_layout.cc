#include "kernels/shard_layout.h"

#include "kernels/cpu/shard_layout.h"
#include "kernels/device_dispatch.h"

namespace tessera::kernels {

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
  kernel_device("fill_normal", {&out});
  cpu::fill_normal(out.f32(), out.numel(), stddev, seed, stream, place);
}

void place_shards(const Tensor& shards, int64_t count, const Tensor& full, const ShardPlace& place) {
  kernel_device("place_shards", {&shards, &full});
  TESSERA_CHECK(count > 0 && shards.numel() % count == 0 && shards.numel() == full.numel(), "place_shards: ",
                count, " shards of ", shards.numel(), " elements in all do not make a tensor of ", full.numel());
  TESSERA_CHECK(place.dim < 0 || (place.dim < static_cast<int>(place.view.size()) &&
                                   count * place.length == place.view[place.dim]),
                "place_shards: ", count, " shards of length ", place.length, " do not tile dimension ", place.dim,
                " of ", shape_str(place.view));
  cpu::place_shards(shards.f32(), count, shards.numel() / count, full.f32(), place);
}

}  // namespace tessera::kernels
