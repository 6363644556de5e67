#include "kernels/cpu/norms.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/testing.h"
#include "kernels/math/column_sums.h"

namespace tessera::kernels {
namespace {

// The CPU implementations over host buffers (kernels/cpu/), beside the tensor entry points.
using namespace cpu;

using testing::max_scaled_error;
using testing::numeric_gradient;
using testing::random_vector;
using testing::to_double;
using Vec = std::vector<double>;

constexpr float kEps = 1e-5f;

struct Shape {
  int64_t rows, cols;
};
// Odd column counts (not multiples of the 8-wide vectors), one row and several, and more rows than
// one backward chunk (32) with a ragged last chunk.
const Shape kShapes[] = {{1, 1}, {1, 7}, {3, 33}, {2, 768}, {70, 33}, {5, 16}};

// ---- float64 references ----

Vec layernorm_ref(const Vec& x, const Vec& w, const Vec* b, int64_t rows, int64_t cols) {
  Vec y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = &x[r * cols];
    double mean = 0, var = 0;
    for (int64_t c = 0; c < cols; ++c) mean += xr[c];
    mean /= cols;
    for (int64_t c = 0; c < cols; ++c) var += (xr[c] - mean) * (xr[c] - mean);
    double rstd = 1 / std::sqrt(var / cols + kEps);
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = (xr[c] - mean) * rstd * w[c] + (b ? (*b)[c] : 0.0);
  }
  return y;
}

// Textbook backward: dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy w.
void layernorm_ref_backward(const Vec& x, const Vec& w, const Vec& dy, int64_t rows, int64_t cols, Vec& dx, Vec& dw,
                            Vec& db) {
  dx.assign(x.size(), 0);
  dw.assign(cols, 0);
  db.assign(cols, 0);
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = &x[r * cols];
    const double* dyr = &dy[r * cols];
    double mean = 0, var = 0;
    for (int64_t c = 0; c < cols; ++c) mean += xr[c];
    mean /= cols;
    for (int64_t c = 0; c < cols; ++c) var += (xr[c] - mean) * (xr[c] - mean);
    double rstd = 1 / std::sqrt(var / cols + kEps);
    double g_mean = 0, gx_mean = 0;
    for (int64_t c = 0; c < cols; ++c) {
      g_mean += dyr[c] * w[c] / cols;
      gx_mean += dyr[c] * w[c] * (xr[c] - mean) * rstd / cols;
    }
    for (int64_t c = 0; c < cols; ++c) {
      double xhat = (xr[c] - mean) * rstd;
      dx[r * cols + c] = rstd * (dyr[c] * w[c] - g_mean - xhat * gx_mean);
      dw[c] += dyr[c] * xhat;
      db[c] += dyr[c];
    }
  }
}

Vec rmsnorm_ref(const Vec& x, const Vec& w, int64_t rows, int64_t cols) {
  Vec y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double sq = 0;
    for (int64_t c = 0; c < cols; ++c) sq += x[r * cols + c] * x[r * cols + c];
    double rstd = 1 / std::sqrt(sq / cols + kEps);
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = x[r * cols + c] * rstd * w[c];
  }
  return y;
}

void rmsnorm_ref_backward(const Vec& x, const Vec& w, const Vec& dy, int64_t rows, int64_t cols, Vec& dx, Vec& dw) {
  dx.assign(x.size(), 0);
  dw.assign(cols, 0);
  for (int64_t r = 0; r < rows; ++r) {
    double sq = 0;
    for (int64_t c = 0; c < cols; ++c) sq += x[r * cols + c] * x[r * cols + c];
    double rstd = 1 / std::sqrt(sq / cols + kEps);
    double gx_mean = 0;
    for (int64_t c = 0; c < cols; ++c) gx_mean += dy[r * cols + c] * w[c] * x[r * cols + c] * rstd / cols;
    for (int64_t c = 0; c < cols; ++c) {
      double xhat = x[r * cols + c] * rstd;
      dx[r * cols + c] = rstd * (dy[r * cols + c] * w[c] - xhat * gx_mean);
      dw[c] += dy[r * cols + c] * xhat;
    }
  }
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

Vec plus(const std::vector<float>& a, const Vec& b) {
  Vec s(b.size());
  for (size_t i = 0; i < b.size(); ++i) s[i] = a[i] + b[i];
  return s;
}

// ---- the references' backward against finite differences of L = sum(y * R) ----

TEST(NormsReference, LayerNormBackwardMatchesFiniteDifferences) {
  for (Shape s : kShapes) {
    SCOPED_TRACE(std::to_string(s.rows) + "x" + std::to_string(s.cols));
    Vec x = to_double(random_vector(s.rows * s.cols, 1, 0.5f, 2.5f));  // offset mean
    Vec w = to_double(random_vector(s.cols, 2, 0.5f, 1.5f));
    Vec b = to_double(random_vector(s.cols, 3));
    Vec R = to_double(random_vector(s.rows * s.cols, 4));
    Vec dx, dw, db;
    layernorm_ref_backward(x, w, R, s.rows, s.cols, dx, dw, db);
    auto gx = numeric_gradient([&](const Vec& v) { return dot(layernorm_ref(v, w, &b, s.rows, s.cols), R); }, x);
    auto gw = numeric_gradient([&](const Vec& v) { return dot(layernorm_ref(x, v, &b, s.rows, s.cols), R); }, w);
    auto gb = numeric_gradient([&](const Vec& v) { return dot(layernorm_ref(x, w, &v, s.rows, s.cols), R); }, b);
    EXPECT_LE(max_scaled_error(dx, gx, 1e-6, 1e-6), 1.0);
    EXPECT_LE(max_scaled_error(dw, gw, 1e-6, 1e-6), 1.0);
    EXPECT_LE(max_scaled_error(db, gb, 1e-6, 1e-6), 1.0);
  }
}

TEST(NormsReference, RmsNormBackwardMatchesFiniteDifferences) {
  for (Shape s : kShapes) {
    SCOPED_TRACE(std::to_string(s.rows) + "x" + std::to_string(s.cols));
    Vec x = to_double(random_vector(s.rows * s.cols, 5));
    Vec w = to_double(random_vector(s.cols, 6, 0.5f, 1.5f));
    Vec R = to_double(random_vector(s.rows * s.cols, 7));
    Vec dx, dw;
    rmsnorm_ref_backward(x, w, R, s.rows, s.cols, dx, dw);
    auto gx = numeric_gradient([&](const Vec& v) { return dot(rmsnorm_ref(v, w, s.rows, s.cols), R); }, x);
    auto gw = numeric_gradient([&](const Vec& v) { return dot(rmsnorm_ref(x, v, s.rows, s.cols), R); }, w);
    EXPECT_LE(max_scaled_error(dx, gx, 1e-6, 1e-6), 1.0);
    EXPECT_LE(max_scaled_error(dw, gw, 1e-6, 1e-6), 1.0);
  }
}

// ---- kernels against the references ----

TEST(Norms, LayerNormMatchesReference) {
  for (Shape s : kShapes) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(std::to_string(s.rows) + "x" + std::to_string(s.cols) +
                   (with_bias ? " bias" : " no bias"));
      const int64_t n = s.rows * s.cols;
      auto x = random_vector(n, 11, 0.5f, 2.5f);
      auto w = random_vector(s.cols, 12, 0.5f, 1.5f);
      auto b = random_vector(s.cols, 13);
      auto dy = random_vector(n, 14);
      std::vector<float> y(n), mean(s.rows), rstd(s.rows);
      layernorm_forward(x.data(), w.data(), with_bias ? b.data() : nullptr, y.data(), mean.data(), rstd.data(),
                        s.rows, s.cols, kEps);
      Vec bd = to_double(b);
      Vec y_ref = layernorm_ref(to_double(x), to_double(w), with_bias ? &bd : nullptr, s.rows, s.cols);
      EXPECT_LE(max_scaled_error(y, y_ref, 1e-5, 1e-5), 1.0);

      // The gradients are accumulated into, so start from non-zero buffers.
      auto dx = random_vector(n, 15), dw = random_vector(s.cols, 16), db = random_vector(s.cols, 17);
      auto dx0 = dx, dw0 = dw, db0 = db;
      layernorm_backward(dy.data(), x.data(), w.data(), mean.data(), rstd.data(), dx.data(), dw.data(),
                         with_bias ? db.data() : nullptr, s.rows, s.cols);
      Vec dx_ref, dw_ref, db_ref;
      layernorm_ref_backward(to_double(x), to_double(w), to_double(dy), s.rows, s.cols, dx_ref, dw_ref, db_ref);
      EXPECT_LE(max_scaled_error(dx, plus(dx0, dx_ref), 1e-5, 1e-5), 1.0);
      EXPECT_LE(max_scaled_error(dw, plus(dw0, dw_ref), 1e-5, 1e-5), 1.0);
      if (with_bias) {
        EXPECT_LE(max_scaled_error(db, plus(db0, db_ref), 1e-5, 1e-5), 1.0);
      } else {
        EXPECT_EQ(db, db0);
      }
    }
  }
}

TEST(Norms, RmsNormMatchesReference) {
  for (Shape s : kShapes) {
    SCOPED_TRACE(std::to_string(s.rows) + "x" + std::to_string(s.cols));
    const int64_t n = s.rows * s.cols;
    auto x = random_vector(n, 21);
    auto w = random_vector(s.cols, 22, 0.5f, 1.5f);
    auto dy = random_vector(n, 23);
    std::vector<float> y(n), rstd(s.rows);
    rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), s.rows, s.cols, kEps);
    EXPECT_LE(max_scaled_error(y, rmsnorm_ref(to_double(x), to_double(w), s.rows, s.cols), 1e-5, 1e-5), 1.0);

    auto dx = random_vector(n, 24), dw = random_vector(s.cols, 25);
    auto dx0 = dx, dw0 = dw;
    rmsnorm_backward(dy.data(), x.data(), w.data(), rstd.data(), dx.data(), dw.data(), s.rows, s.cols);
    Vec dx_ref, dw_ref;
    rmsnorm_ref_backward(to_double(x), to_double(w), to_double(dy), s.rows, s.cols, dx_ref, dw_ref);
    EXPECT_LE(max_scaled_error(dx, plus(dx0, dx_ref), 1e-5, 1e-5), 1.0);
    EXPECT_LE(max_scaled_error(dw, plus(dw0, dw_ref), 1e-5, 1e-5), 1.0);
  }
}

// ---- weight gradients are bitwise independent of the thread count ----

template <typename T>
bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

TEST(Norms, BackwardIsDeterministicAcrossThreadCounts) {
  const int64_t rows = 301, cols = 37;  // ten chunks, the last one ragged
  auto x = random_vector(rows * cols, 31);
  auto w = random_vector(cols, 32);
  auto b = random_vector(cols, 33);
  auto dy = random_vector(rows * cols, 34);
  std::vector<float> y(rows * cols), mean(rows), rstd(rows);
  layernorm_forward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), rows, cols, kEps);

  const int saved = omp_get_max_threads();
  std::vector<std::vector<float>> ln_dx, ln_dw, ln_db, rms_dx, rms_dw;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    std::vector<float> dx(rows * cols, 0.5f), dw(cols, 0.25f), db(cols, -0.25f);
    layernorm_backward(dy.data(), x.data(), w.data(), mean.data(), rstd.data(), dx.data(), dw.data(), db.data(),
                       rows, cols);
    ln_dx.push_back(dx), ln_dw.push_back(dw), ln_db.push_back(db);
    std::vector<float> rdx(rows * cols, 0.5f), rdw(cols, 0.25f);
    rmsnorm_backward(dy.data(), x.data(), w.data(), rstd.data(), rdx.data(), rdw.data(), rows, cols);
    rms_dx.push_back(rdx), rms_dw.push_back(rdw);
  }
  omp_set_num_threads(saved);
  for (size_t i = 1; i < ln_dx.size(); ++i) {
    EXPECT_TRUE(bitwise_equal(ln_dx[0], ln_dx[i]));
    EXPECT_TRUE(bitwise_equal(ln_dw[0], ln_dw[i]));
    EXPECT_TRUE(bitwise_equal(ln_db[0], ln_db[i]));
    EXPECT_TRUE(bitwise_equal(rms_dx[0], rms_dx[i]));
    EXPECT_TRUE(bitwise_equal(rms_dw[0], rms_dw[i]));
  }
}

// ---- the weight gradients follow kernels/math/column_sums.h's order, bit for bit ----

// That order written out plainly: fp32 partials over each chunk of 32 rows in row order, then the
// partials in chunk order in double. The GPU's kernels follow it too (kernels/cuda/cuda_norms_test.cc
// checks them against these CPU kernels bit for bit), so this pins both.
std::vector<float> ordered_column_sums(const std::vector<float>& terms, int64_t rows, int64_t cols,
                                       std::vector<float> out) {
  for (int64_t c = 0; c < cols; ++c) {
    double acc = 0;
    for (int64_t k = 0; k * math::kColumnSumRows < rows; ++k) {
      float partial = 0.0f;
      for (int64_t r = k * math::kColumnSumRows; r < std::min(rows, (k + 1) * math::kColumnSumRows); ++r)
        partial += terms[r * cols + c];
      acc += partial;
    }
    out[c] += static_cast<float>(acc);
  }
  return out;
}

TEST(Norms, WeightGradientsSumInTheSharedOrder) {
  const int64_t rows = 301, cols = 37;  // ten chunks, the last one ragged
  auto x = random_vector(rows * cols, 41, 0.5f, 2.5f);
  auto w = random_vector(cols, 42);
  auto dy = random_vector(rows * cols, 43);
  std::vector<float> y(rows * cols), mean(rows), rstd(rows);
  layernorm_forward(x.data(), w.data(), nullptr, y.data(), mean.data(), rstd.data(), rows, cols, kEps);
  // The terms, each rounded on its own (stored before they are summed: no contraction into the sum).
  std::vector<float> dw_terms(rows * cols), rms_terms(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      dw_terms[r * cols + c] = math::norm_weight_grad_term(dy[r * cols + c], x[r * cols + c], mean[r], rstd[r]);
      rms_terms[r * cols + c] = math::norm_weight_grad_term(dy[r * cols + c], x[r * cols + c], 0.0f, rstd[r]);
    }
  std::vector<float> dx(rows * cols, 0.0f), dw(cols, 0.25f), db(cols, -0.25f);
  const auto dw0 = dw, db0 = db;
  layernorm_backward(dy.data(), x.data(), w.data(), mean.data(), rstd.data(), dx.data(), dw.data(), db.data(), rows,
                     cols);
  EXPECT_TRUE(bitwise_equal(dw, ordered_column_sums(dw_terms, rows, cols, dw0))) << "LayerNorm dw";
  EXPECT_TRUE(bitwise_equal(db, ordered_column_sums(dy, rows, cols, db0))) << "LayerNorm db";
  // RMSNorm with LayerNorm's rstd (any positive row scale serves): its dw terms are x * rstd * dy.
  std::vector<float> rms_dw(cols, 0.25f);
  rmsnorm_backward(dy.data(), x.data(), w.data(), rstd.data(), dx.data(), rms_dw.data(), rows, cols);
  EXPECT_TRUE(bitwise_equal(rms_dw, ordered_column_sums(rms_terms, rows, cols, dw0))) << "RMSNorm dw";
}

}  // namespace
}  // namespace tessera::kernels
