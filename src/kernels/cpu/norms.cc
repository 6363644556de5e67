// LayerNorm and RMSNorm, fp32 storage with float64 row statistics.
//
// Forward is parallel over rows; the residual forms add the residual connection into each row just
// before normalising it (one pass, the same bits as kernels::add_into then the norm). Backward is
// parallel over chunks of kColumnSumRows rows: a chunk computes its rows' dx and sums their weight-
// gradient terms into its own partial slot, and the partials are then added up in chunk order
// (kernels/math/column_sums.h's fixed order; a float sum depends on its order). The GPU's backward is
// the same loop, a block per chunk (kernels/cuda/norms.cu), so dw and db are the same bits on both.
// Which thread handles a chunk never changes a bit. Compiled with -ffp-contract=off (CMakeLists.txt):
// dy * xhat is rounded before its add, as on the GPU.
#include "kernels/cpu/norms.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "core/profiler.h"
#include "kernels/cpu/column_sums.h"
#include "kernels/math/column_sums.h"
#include "kernels/precision.h"
#include "kernels/parallel_grain.h"

namespace tessera::kernels::cpu {
namespace {

using math::kColumnSumRows;
using math::norm_weight_grad_term;

int64_t num_chunks(int64_t rows) { return math::column_sum_chunks(rows); }

// The residual connection's add on one row, as kernels::add_into: one fp32 add per element.
void add_row(float* h, const float* residual, int64_t cols) {
#pragma omp simd
  for (int64_t c = 0; c < cols; ++c) h[c] += residual[c];
}

// One row of LayerNorm's forward: y = (x - mean) * rstd * w (+ b), mean and rstd saved.
void layernorm_row(const float* xr, const float* w, const float* b, float* yr, float& mean, float& rstd, int64_t cols,
                   float eps, DType round_output) {
  // Two passes in double: the mean first, then the variance about it, which stays accurate when
  // |mean| >> std (a single pass E[x^2] - E[x]^2 cancels catastrophically).
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t c = 0; c < cols; ++c) sum += xr[c];
  double m = sum / static_cast<double>(cols);
  double sq = 0;
#pragma omp simd reduction(+ : sq)
  for (int64_t c = 0; c < cols; ++c) {
    double d = xr[c] - m;
    sq += d * d;
  }
  double s = 1.0 / std::sqrt(sq / static_cast<double>(cols) + eps);
  float mf = static_cast<float>(m), sf = static_cast<float>(s);
  if (b) {
    for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mf) * sf * w[c] + b[c];
  } else {
    for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mf) * sf * w[c];
  }
  if (round_output != DType::F32) round_to_serial(round_output, yr, yr, cols);
  mean = mf;
  rstd = sf;
}

// One row of RMSNorm's forward: y = x * rstd * w, rstd saved.
void rmsnorm_row(const float* xr, const float* w, float* yr, float& rstd, int64_t cols, float eps,
                 DType round_output) {
  double sq = 0;
#pragma omp simd reduction(+ : sq)
  for (int64_t c = 0; c < cols; ++c) sq += static_cast<double>(xr[c]) * xr[c];
  float s = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(cols) + eps));
  for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] * s * w[c];
  if (round_output != DType::F32) round_to_serial(round_output, yr, yr, cols);
  rstd = s;
}

}  // namespace

void layernorm_forward(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                       int64_t rows, int64_t cols, float eps, DType round_output) {
  TESSERA_PROFILE_SCOPE("layernorm_forward");
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(2 * rows * cols))
  for (int64_t r = 0; r < rows; ++r)
    layernorm_row(x + r * cols, w, b, y + r * cols, mean[r], rstd[r], cols, eps, round_output);
}

void residual_layernorm_forward(float* h, const float* residual, const float* w, const float* b, float* y, float* mean,
                                float* rstd, int64_t rows, int64_t cols, float eps, DType round_output) {
  TESSERA_PROFILE_SCOPE("residual_layernorm_forward");
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(3 * rows * cols))
  for (int64_t r = 0; r < rows; ++r) {
    add_row(h + r * cols, residual + r * cols, cols);
    layernorm_row(h + r * cols, w, b, y + r * cols, mean[r], rstd[r], cols, eps, round_output);
  }
}

// With xhat = (x - mean) * rstd and g = dy * w (the gradient wrt xhat):
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  dw = sum_rows dy * xhat,  db = sum_rows dy.
void layernorm_backward(const float* dy, const float* x, const float* w, const float* mean, const float* rstd,
                        float* dx, float* dw, float* db, int64_t rows, int64_t cols) {
  TESSERA_PROFILE_SCOPE("layernorm_backward");
  int64_t chunks = num_chunks(rows);
  // Uninitialised scratch: each chunk zeroes its own slot.
  std::unique_ptr<float[]> dw_part(new float[chunks * cols]);
  std::unique_ptr<float[]> db_part(db ? new float[chunks * cols] : nullptr);

#pragma omp parallel for schedule(static) if (parallel : parallel_worth(2 * rows * cols))
  for (int64_t k = 0; k < chunks; ++k) {
    float* dwp = dw_part.get() + k * cols;
    float* dbp = db ? db_part.get() + k * cols : nullptr;
    for (int64_t c = 0; c < cols; ++c) dwp[c] = 0.0f;
    if (dbp)
      for (int64_t c = 0; c < cols; ++c) dbp[c] = 0.0f;

    for (int64_t r = k * kColumnSumRows; r < std::min(rows, (k + 1) * kColumnSumRows); ++r) {
      const float* dyr = dy + r * cols;
      const float* xr = x + r * cols;
      float* dxr = dx + r * cols;
      const float m = mean[r], s = rstd[r];

      double g_sum = 0, gx_sum = 0;
#pragma omp simd reduction(+ : g_sum, gx_sum)
      for (int64_t c = 0; c < cols; ++c) {
        float g = dyr[c] * w[c];
        g_sum += g;
        gx_sum += g * ((xr[c] - m) * s);
      }
      const float g_mean = static_cast<float>(g_sum / static_cast<double>(cols));
      const float gx_mean = static_cast<float>(gx_sum / static_cast<double>(cols));

      for (int64_t c = 0; c < cols; ++c) {
        float xhat = (xr[c] - m) * s;
        dxr[c] += s * (dyr[c] * w[c] - g_mean - xhat * gx_mean);
        dwp[c] += norm_weight_grad_term(dyr[c], xr[c], m, s);
      }
      if (dbp)
        for (int64_t c = 0; c < cols; ++c) dbp[c] += dyr[c];
    }
  }

  sum_column_partials(dw_part.get(), chunks, cols, dw);
  if (db) sum_column_partials(db_part.get(), chunks, cols, db);
}

void rmsnorm_forward(const float* x, const float* w, float* y, float* rstd, int64_t rows, int64_t cols, float eps,
                     DType round_output) {
  TESSERA_PROFILE_SCOPE("rmsnorm_forward");
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(2 * rows * cols))
  for (int64_t r = 0; r < rows; ++r) rmsnorm_row(x + r * cols, w, y + r * cols, rstd[r], cols, eps, round_output);
}

void residual_rmsnorm_forward(float* h, const float* residual, const float* w, float* y, float* rstd, int64_t rows,
                              int64_t cols, float eps, DType round_output) {
  TESSERA_PROFILE_SCOPE("residual_rmsnorm_forward");
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(3 * rows * cols))
  for (int64_t r = 0; r < rows; ++r) {
    add_row(h + r * cols, residual + r * cols, cols);
    rmsnorm_row(h + r * cols, w, y + r * cols, rstd[r], cols, eps, round_output);
  }
}

// With xhat = x * rstd and g = dy * w: dx = rstd * (g - xhat * mean(g * xhat)), dw = sum_rows dy * xhat.
// (As LayerNorm without the mean-centring term.)
void rmsnorm_backward(const float* dy, const float* x, const float* w, const float* rstd, float* dx, float* dw,
                      int64_t rows, int64_t cols) {
  TESSERA_PROFILE_SCOPE("rmsnorm_backward");
  int64_t chunks = num_chunks(rows);
  std::unique_ptr<float[]> dw_part(new float[chunks * cols]);

#pragma omp parallel for schedule(static) if (parallel : parallel_worth(2 * rows * cols))
  for (int64_t k = 0; k < chunks; ++k) {
    float* dwp = dw_part.get() + k * cols;
    for (int64_t c = 0; c < cols; ++c) dwp[c] = 0.0f;

    for (int64_t r = k * kColumnSumRows; r < std::min(rows, (k + 1) * kColumnSumRows); ++r) {
      const float* dyr = dy + r * cols;
      const float* xr = x + r * cols;
      float* dxr = dx + r * cols;
      const float s = rstd[r];

      double gx_sum = 0;
#pragma omp simd reduction(+ : gx_sum)
      for (int64_t c = 0; c < cols; ++c) gx_sum += (dyr[c] * w[c]) * (xr[c] * s);
      const float gx_mean = static_cast<float>(gx_sum / static_cast<double>(cols));

      for (int64_t c = 0; c < cols; ++c) {
        float xhat = xr[c] * s;
        dxr[c] += s * (dyr[c] * w[c] - xhat * gx_mean);
        dwp[c] += norm_weight_grad_term(dyr[c], xr[c], 0.0f, s);  // x - 0 is x: xhat as above
      }
    }
  }

  sum_column_partials(dw_part.get(), chunks, cols, dw);
}

}  // namespace tessera::kernels::cpu
