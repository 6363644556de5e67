#include "kernels/cpu/moe_combine.h"

#include <cmath>

#include "core/check.h"
#include "kernels/parallel_grain.h"

namespace tessera::kernels::cpu {
namespace {

// The two-way softmax of a row's logits, stable for any magnitude.
void softmax2(const float* logits, double& c0, double& c1) {
  const double d = static_cast<double>(logits[1]) - static_cast<double>(logits[0]);
  c0 = 1.0 / (1.0 + std::exp(d));
  c1 = 1.0 - c0;
}

}  // namespace

void scale_rows(float* rows, const float* weight, int64_t n, int64_t h) {
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(n * h))
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < h; ++j) rows[r * h + j] *= weight[r];
}

void scatter_slot_values(const float* values, const int32_t* slot, int64_t n, float* out, int64_t out_n) {
  for (int64_t r = 0; r < n; ++r) {
    if (slot[r] < 0) continue;
    TESSERA_CHECK(slot[r] < out_n, "scatter_slot_values: slot ", slot[r], " outside ", out_n, " values");
    out[slot[r]] += values[r];
  }
}

void two_way_mix_forward(const float* a, const float* b, const float* logits, float* y, int64_t rows, int64_t h) {
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(2 * rows * h))
  for (int64_t t = 0; t < rows; ++t) {
    double c0, c1;
    softmax2(logits + 2 * t, c0, c1);
    for (int64_t j = 0; j < h; ++j)
      y[t * h + j] = static_cast<float>(c0 * a[t * h + j] + c1 * b[t * h + j]);
  }
}

void two_way_mix_backward(const float* a, const float* b, const float* logits, const float* dy, float* da,
                          float* db, float* dlogits, int64_t rows, int64_t h) {
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(4 * rows * h))
  for (int64_t t = 0; t < rows; ++t) {
    double c0, c1;
    softmax2(logits + 2 * t, c0, c1);
    double g0 = 0, g1 = 0;  // dL/dc0, dL/dc1
    for (int64_t j = 0; j < h; ++j) {
      const double g = dy[t * h + j];
      g0 += g * a[t * h + j];
      g1 += g * b[t * h + j];
      da[t * h + j] = static_cast<float>(c0 * g);
      db[t * h + j] = static_cast<float>(c1 * g);
    }
    // Softmax: dz_i = c_i (g_i - sum_j c_j g_j); with two entries dz_0 = c0 c1 (g0 - g1) = -dz_1.
    const double dz0 = c0 * c1 * (g0 - g1);
    dlogits[2 * t] = static_cast<float>(dz0);
    dlogits[2 * t + 1] = static_cast<float>(-dz0);
  }
}

}  // namespace tessera::kernels::cpu
