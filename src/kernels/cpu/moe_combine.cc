#include "kernels/cpu/moe_combine.h"

#include "core/check.h"
#include "kernels/math/two_way_mix.h"
#include "kernels/parallel_grain.h"

namespace tessera::kernels::cpu {

using math::softmax2;

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
      y[t * h + j] = math::two_way_mix(a[t * h + j], b[t * h + j], c0, c1);
  }
}

void two_way_mix_backward(const float* a, const float* b, const float* logits, const float* dy, float* da,
                          float* db, float* dlogits, int64_t rows, int64_t h) {
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(4 * rows * h))
  for (int64_t t = 0; t < rows; ++t)
    math::two_way_mix_backward_row(a + t * h, b + t * h, logits + 2 * t, dy + t * h, da + t * h, db + t * h,
                                   dlogits + 2 * t, h);
}

}  // namespace tessera::kernels::cpu
