#include "kernels/cpu/elementwise.h"
#include "kernels/parallel_grain.h"

namespace tessera::kernels::cpu {

void add_into(float* a, const float* b, int64_t n) {
#pragma omp parallel for simd schedule(static) if (parallel : parallel_worth(n))
  for (int64_t i = 0; i < n; ++i) a[i] += b[i];
}

void add_bias_rows(float* y, const float* bias, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(rows * cols))
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) y[r * cols + j] += bias[j];
}

void scale(const float* x, float scale, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = scale * x[i];
}

}  // namespace tessera::kernels::cpu
