// Token + position embedding lookup and its scatter-add backward.
//
// The backward adds rows of dout into rows of dwte picked by token id, and ids repeat, so rows cannot
// be split across threads without races or order-dependent sums. Instead threads split the *columns*:
// each owns a range of columns and walks all rows in order, so every element of dwte/dwpe receives its
// additions in row order whatever the thread count.
#include "kernels/cpu/embedding.h"

#include <omp.h>

#include <algorithm>

#include "core/check.h"
#include "core/profiler.h"
#include "kernels/parallel_grain.h"

namespace tessera::kernels::cpu {

void embedding_forward(const int32_t* tokens, const int32_t* positions, const float* wte, const float* wpe,
                       float* out, int64_t rows, int64_t hidden, int64_t vocab_begin, int64_t vocab_end) {
  TESSERA_PROFILE_SCOPE("embedding_forward");
  TESSERA_CHECK(wpe == nullptr || positions != nullptr, "embedding_forward: wpe given without positions");
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(rows * hidden))
  for (int64_t t = 0; t < rows; ++t) {
    float* o = out + t * hidden;
    const int64_t id = tokens[t];
    // An id owned by another vocab shard contributes zero here; the shards' outputs are summed later.
    if (id >= vocab_begin && id < vocab_end) {
      const float* e = wte + (id - vocab_begin) * hidden;
      for (int64_t c = 0; c < hidden; ++c) o[c] = e[c];
    } else {
      for (int64_t c = 0; c < hidden; ++c) o[c] = 0.0f;
    }
    if (wpe) {
      const float* p = wpe + static_cast<int64_t>(positions[t]) * hidden;
      for (int64_t c = 0; c < hidden; ++c) o[c] += p[c];
    }
  }
}

void embedding_backward(const int32_t* tokens, const int32_t* positions, const float* dout, float* dwte,
                        float* dwpe, int64_t rows, int64_t hidden, int64_t vocab_begin, int64_t vocab_end) {
  TESSERA_PROFILE_SCOPE("embedding_backward");
  TESSERA_CHECK(dwpe == nullptr || positions != nullptr, "embedding_backward: dwpe given without positions");
#pragma omp parallel if (parallel : parallel_worth(rows * hidden))
  {
    // One contiguous column range per thread (whole cache lines), so each thread streams through the
    // rows once. How the columns are split does not matter for the result.
    const int64_t nt = omp_get_num_threads(), tid = omp_get_thread_num();
    const int64_t per = ((hidden + nt - 1) / nt + 15) / 16 * 16;
    const int64_t c0 = std::min(hidden, tid * per), c1 = std::min(hidden, c0 + per);
    for (int64_t t = 0; t < rows; ++t) {
      const float* d = dout + t * hidden;
      const int64_t id = tokens[t];
      if (id >= vocab_begin && id < vocab_end) {
        float* g = dwte + (id - vocab_begin) * hidden;
        for (int64_t c = c0; c < c1; ++c) g[c] += d[c];
      }
      if (dwpe) {
        float* g = dwpe + static_cast<int64_t>(positions[t]) * hidden;
        for (int64_t c = c0; c < c1; ++c) g[c] += d[c];
      }
    }
  }
}

}  // namespace tessera::kernels::cpu
