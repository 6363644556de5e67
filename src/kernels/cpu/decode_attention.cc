#include "kernels/cpu/decode_attention.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "core/profiler.h"
#include "kernels/vector_math.h"

namespace tessera::kernels::cpu {

void attention_decode(const float* q, const float* k_cache, const float* v_cache, float* out, int64_t n,
                      int64_t past, int64_t heads, int64_t kv_heads, int64_t d, float softmax_scale) {
  TESSERA_PROFILE_SCOPE("attention_decode");
  TESSERA_CHECK(kv_heads > 0 && heads % kv_heads == 0, "attention_decode: ", heads,
                " query heads are not a multiple of ", kv_heads, " key/value heads");
  const int64_t per_group = heads / kv_heads;
#pragma omp parallel
  {
    std::vector<float> scores(past + n);
#pragma omp for collapse(2) schedule(static)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t keys = past + i + 1, g = h / per_group;
        const float* qi = q + (i * heads + h) * d;
        float max = -INFINITY;
        for (int64_t j = 0; j < keys; ++j) {
          const float* kj = k_cache + (j * kv_heads + g) * d;
          float s = 0;
          for (int64_t x = 0; x < d; ++x) s += qi[x] * kj[x];
          scores[j] = s * softmax_scale;
          max = std::max(max, scores[j]);
        }
        float sum = 0;
        for (int64_t j = 0; j < keys; ++j) sum += scores[j] = exp_approx(scores[j] - max);
        float* o = out + (i * heads + h) * d;
        std::fill(o, o + d, 0.0f);
        for (int64_t j = 0; j < keys; ++j) {
          const float p = scores[j] / sum;
          const float* vj = v_cache + (j * kv_heads + g) * d;
          for (int64_t x = 0; x < d; ++x) o[x] += p * vj[x];
        }
      }
  }
}

}  // namespace tessera::kernels::cpu
