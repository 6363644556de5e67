#include "kernels/cpu/shard_layout.h"

#include "core/philox.h"
#include "kernels/parallel_grain.h"

namespace tessera::kernels::cpu {

void fill_normal(float* out, int64_t n, float stddev, uint64_t seed, uint64_t stream, const ShardPlace& place) {
  PhiloxStream philox(seed, stream);
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(8 * n))
  for (int64_t i = 0; i < n; ++i) out[i] = stddev * philox.normal(static_cast<uint64_t>(full_index(place, i)));
}

void place_shards(const float* shards, int64_t count, int64_t n, float* full, const ShardPlace& place) {
  for (int64_t r = 0; r < count; ++r) {
    ShardPlace shard = place;
    shard.offset = r * place.length;
    for (int64_t i = 0; i < n; ++i) full[full_index(shard, i)] = shards[r * n + i];
  }
}

}  // namespace tessera::kernels::cpu
