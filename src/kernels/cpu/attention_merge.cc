#include "kernels/cpu/attention_merge.h"

#include <algorithm>
#include <cmath>

#include "core/profiler.h"
#include "kernels/parallel_grain.h"

namespace tessera::kernels::cpu {

void attention_merge_into(float* out, float* lse, const float* part_out, const float* part_lse, int64_t seq,
                          int64_t batch, int64_t heads, int64_t head_dim) {
  TESSERA_PROFILE_SCOPE("attention_merge_into");
  const int64_t rows = seq * batch * heads;
#pragma omp parallel for if (parallel : parallel_worth(rows * head_dim))
  for (int64_t row = 0; row < rows; ++row) {
    // row = (s * batch + b) * heads + h, the output's order; lse is [batch, heads, seq].
    const int64_t h = row % heads, b = row / heads % batch, s = row / (heads * batch);
    const int64_t stat = (b * heads + h) * seq + s;
    const float a = lse[stat], p = part_lse[stat];
    const float m = std::max(a, p);
    if (m == -INFINITY) continue;  // neither block has a visible key for this row
    // Each weight is computed against the merged lse, so the two sum to 1 to rounding.
    const float merged = m + std::log(std::exp(a - m) + std::exp(p - m));
    const float wa = std::exp(a - merged), wp = std::exp(p - merged);
    float* o = out + row * head_dim;
    const float* po = part_out + row * head_dim;
    for (int64_t x = 0; x < head_dim; ++x) o[x] = wa * o[x] + wp * po[x];
    lse[stat] = merged;
  }
}

}  // namespace tessera::kernels::cpu
