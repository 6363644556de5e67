#include "kernels/cpu/column_sums.h"

#include <algorithm>

#include "kernels/parallel_grain.h"

namespace tessera::kernels::cpu {

void sum_column_partials(const float* partial, int64_t chunks, int64_t cols, float* out) {
  constexpr int64_t kColBlock = 64;  // columns per task
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(chunks * cols))
  for (int64_t c0 = 0; c0 < cols; c0 += kColBlock) {
    const int64_t n = std::min(kColBlock, cols - c0);
    double acc[kColBlock] = {};
    for (int64_t k = 0; k < chunks; ++k) {
      const float* p = partial + k * cols + c0;
      for (int64_t j = 0; j < n; ++j) acc[j] += p[j];
    }
    for (int64_t j = 0; j < n; ++j) out[c0 + j] += static_cast<float>(acc[j]);
  }
}

}  // namespace tessera::kernels::cpu
