#include "kernels/elementwise.h"

namespace tessera::kernels {

void add_into(float* a, const float* b, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) a[i] += b[i];
}

void scale(const float* x, float scale, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = scale * x[i];
}

}  // namespace tessera::kernels
