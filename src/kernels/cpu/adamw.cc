// AdamW step and the sum of squares for the gradient norm, fp32 state. The per-element update is
// kernels/math/adamw.h, shared with a GPU kernel.
//
// Both run over fixed chunks of kChunk elements (a multiple of the SIMD width), so each element takes
// the same code path, and each partial sum covers the same elements, whatever the thread count.
#include "kernels/cpu/adamw.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/profiler.h"
#include "kernels/math/adamw.h"
#include "kernels/math/blocked_sum.h"
#include "kernels/parallel_grain.h"

#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace tessera::kernels::cpu {
namespace {

constexpr int64_t kChunk = 8192;

void update_chunk(float* p, const float* g, float* m, float* v, int64_t n, const math::AdamWCoeffs& k) {
  int64_t i = 0;
#if defined(__AVX__)
  // By hand because GCC keeps sqrtf a scalar call under the default -fmath-errno (it might have to
  // set errno), which makes the whole loop ~4x slower. Same formula as math::adamw_update_one, 8 lanes.
  const __m256 decay = _mm256_set1_ps(k.decay), step = _mm256_set1_ps(k.step_size);
  const __m256 ibc2 = _mm256_set1_ps(k.inv_bc2_sqrt), eps = _mm256_set1_ps(k.eps);
  const __m256 b1 = _mm256_set1_ps(k.b1), c1 = _mm256_set1_ps(k.one_minus_b1);
  const __m256 b2 = _mm256_set1_ps(k.b2), c2 = _mm256_set1_ps(k.one_minus_b2);
  const __m256 gscale = _mm256_set1_ps(k.grad_scale);
  for (; i + 8 <= n; i += 8) {
    __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g + i), gscale);
    __m256 mi = _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(m + i)), _mm256_mul_ps(c1, gi));
    __m256 vi = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(v + i)), _mm256_mul_ps(_mm256_mul_ps(c2, gi), gi));
    __m256 denom = _mm256_add_ps(_mm256_mul_ps(_mm256_sqrt_ps(vi), ibc2), eps);
    __m256 pi = _mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(p + i), decay),
                              _mm256_div_ps(_mm256_mul_ps(step, mi), denom));
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    _mm256_storeu_ps(p + i, pi);
  }
#endif
  for (; i < n; ++i) math::adamw_update_one(p[i], g[i] * k.grad_scale, m[i], v[i], k);
}

// Sum of squares of n <= kChunk floats in double, 8 independent accumulators (vectorised as SIMD
// lanes) added in a fixed order: the result depends only on the data.
double chunk_sum_of_squares(const float* x, int64_t n) {
  double acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += static_cast<double>(x[i + l]) * x[i + l];
  for (; i < n; ++i) acc[0] += static_cast<double>(x[i]) * x[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// One chunk's partial in the GPU's order: lane l adds x[l]^2, x[l + 256]^2, ... (vectorised across
// lanes), then the block's tree over the lanes.
double blocked_chunk_sum_of_squares(const float* x, int64_t n) {
  double lanes[math::kBlockedLanes] = {};
  for (int64_t i = 0; i < n; i += math::kBlockedLanes) {
    const int64_t m = std::min<int64_t>(math::kBlockedLanes, n - i);
    for (int64_t l = 0; l < m; ++l) lanes[l] = math::dadd_rn(lanes[l], math::dmul_rn(x[i + l], x[i + l]));
  }
  return math::block_sum_order(lanes);
}

}  // namespace

StepScalars grad_norm_and_clip(const float* x, int64_t n, float clip_grad, float loss_scale) {
  TESSERA_PROFILE_SCOPE("grad_norm_and_clip");
  const int64_t chunks = (n + math::kBlockedChunk - 1) / math::kBlockedChunk;
  std::unique_ptr<double[]> partial(new double[std::max<int64_t>(chunks, 1)]);
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(n))
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t i = c * math::kBlockedChunk;
    partial[c] = blocked_chunk_sum_of_squares(x + i, std::min(math::kBlockedChunk, n - i));
  }
  // The partials as the GPU's last block sums them: lane l takes partials l, l + 256, ... in turn.
  double lanes[math::kBlockedLanes] = {};
  for (int64_t c = 0; c < chunks; ++c) lanes[c % math::kBlockedLanes] = math::dadd_rn(lanes[c % math::kBlockedLanes], partial[c]);
  StepScalars out;
  out.sum_of_squares = chunks == 0 ? 0.0 : math::block_sum_order(lanes);
  math::step_scalars_of(out.sum_of_squares, clip_grad, loss_scale, &out.grad_norm, &out.clip_scale);
  return out;
}

void adamw_multi_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, const int64_t* table,
                      int64_t segments, const AdamWHyper& h, float clip_scale) {
  TESSERA_PROFILE_SCOPE("adamw_multi_step");
  if (!std::isfinite(clip_scale)) return;  // the norm overflowed: no step, as on the GPU
  AdamWHyper with = h, without = h;
  with.grad_scale = without.grad_scale = clip_scale;
  without.weight_decay = 0;
  const math::AdamWCoeffs decayed = math::adamw_coeffs(with), kept = math::adamw_coeffs(without);
  // (segment, chunk) tasks: elementwise, so any cut gives the same bits.
  std::vector<std::pair<int64_t, int64_t>> tasks;
  for (int64_t s = 0; s < segments; ++s)
    for (int64_t i = 0; i < table[5 * s + 2]; i += kChunk) tasks.emplace_back(s, i);
  const int64_t n_tasks = static_cast<int64_t>(tasks.size());
#pragma omp parallel for schedule(static) if (parallel : n_tasks > 1)
  for (int64_t k = 0; k < n_tasks; ++k) {
    const int64_t* row = table + 5 * tasks[k].first;
    const int64_t i = tasks[k].second, len = std::min(kChunk, row[2] - i), p = row[1] + i, st = row[3] + i;
    update_chunk(param + p, grad + p, exp_avg + st, exp_avg_sq + st, len, row[4] ? decayed : kept);
  }
}

void adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n, const AdamWHyper& h) {
  TESSERA_PROFILE_SCOPE("adamw_step");
  const math::AdamWCoeffs k = math::adamw_coeffs(h);
  int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(4 * n))
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t i = c * kChunk, len = std::min(kChunk, n - i);
    update_chunk(param + i, grad + i, exp_avg + i, exp_avg_sq + i, len, k);
  }
}

double sum_of_squares(const float* x, int64_t n) {
  TESSERA_PROFILE_SCOPE("sum_of_squares");
  int64_t chunks = (n + kChunk - 1) / kChunk;
  std::unique_ptr<double[]> partial(new double[chunks]);
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(n))
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t i = c * kChunk;
    partial[c] = chunk_sum_of_squares(x + i, std::min(kChunk, n - i));
  }
  double total = 0;
  for (int64_t c = 0; c < chunks; ++c) total += partial[c];  // in chunk order
  return total;
}

}  // namespace tessera::kernels::cpu
