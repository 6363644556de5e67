#include "kernels/gemm.h"

#include <gtest/gtest.h>

#include "core/testing.h"
#include "kernels/linear.h"
#include "kernels/precision.h"

namespace tessera::kernels {
namespace {

using testing::max_scaled_error;
using testing::random_vector;

// C = alpha op(A) op(B) + beta C in float64, on row-major storage with leading dimensions.
std::vector<double> reference_gemm(const GemmArgs& g, const std::vector<float>& c0) {
  std::vector<double> c(c0.begin(), c0.end());
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t j = 0; j < g.n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < g.k; ++p) {
        // 16-bit inputs are rounded before they are multiplied (round_to is the identity for F32).
        double a = round_to(g.input_type, g.trans_a == Trans::N ? g.a[i * g.lda + p] : g.a[p * g.lda + i]);
        double b = round_to(g.input_type, g.trans_b == Trans::N ? g.b[p * g.ldb + j] : g.b[j * g.ldb + p]);
        s += a * b;
      }
      double& out = c[i * g.ldc + j];
      out = g.alpha * s + (g.beta == 0 ? 0.0 : g.beta * out) + (g.bias ? g.bias[j] : 0.0);
    }
  return c;
}

struct Case {
  Trans ta, tb;
  int64_t m, n, k;
  float alpha, beta;
  bool bias;
};

void expect_matches_reference(DType input_type) {
  std::vector<Case> cases = {
      {Trans::N, Trans::N, 5, 7, 3, 1, 0, false},  {Trans::N, Trans::T, 33, 17, 65, 1, 0, true},
      {Trans::T, Trans::N, 64, 48, 31, 1, 1, false}, {Trans::T, Trans::T, 9, 130, 12, 0.5f, 0.25f, false},
      {Trans::N, Trans::N, 1, 1, 1, 2, 1, false},   {Trans::N, Trans::T, 128, 96, 200, 1, 0, false},
  };
  for (const Case& cs : cases) {
    // Leading dimensions larger than the logical width exercise strided storage.
    int64_t a_rows = cs.ta == Trans::N ? cs.m : cs.k, a_cols = cs.ta == Trans::N ? cs.k : cs.m;
    int64_t b_rows = cs.tb == Trans::N ? cs.k : cs.n, b_cols = cs.tb == Trans::N ? cs.n : cs.k;
    int64_t lda = a_cols + 3, ldb = b_cols + 1, ldc = cs.n + 2;
    auto a = random_vector(a_rows * lda, 1), b = random_vector(b_rows * ldb, 2), c = random_vector(cs.m * ldc, 3);
    auto bias = random_vector(cs.n, 4);
    GemmArgs g{cs.ta, cs.tb, cs.m, cs.n, cs.k, a.data(), lda, b.data(), ldb, c.data(), ldc, cs.alpha, cs.beta,
               cs.bias ? bias.data() : nullptr, input_type};
    auto expected = reference_gemm(g, c);
    gemm(g);
    for (int64_t i = 0; i < cs.m; ++i)
      for (int64_t j = 0; j < cs.n; ++j)
        ASSERT_NEAR(c[i * ldc + j], expected[i * ldc + j], 1e-4 * (1 + std::abs(expected[i * ldc + j])))
            << dtype_name(input_type) << " m=" << cs.m << " n=" << cs.n << " k=" << cs.k << " at " << i << "," << j;
    // Padding columns of C are never written.
    for (int64_t i = 0; i < cs.m; ++i) EXPECT_EQ(c[i * ldc + cs.n], static_cast<float>(expected[i * ldc + cs.n]));
  }
}

TEST(Gemm, MatchesFloat64ReferenceForEveryTransposeAndEpilogue) { expect_matches_reference(DType::F32); }

// 16-bit inputs with fp32 accumulation equal the float64 product of the rounded inputs, on oneDNN's
// 16-bit kernel where the CPU has one and on the rounded fp32 path elsewhere.
TEST(Gemm, SixteenBitInputsMatchTheReferenceOfTheRoundedInputs) {
  for (DType t : {DType::BF16, DType::F16}) {
    std::printf("%s inputs: %s\n", dtype_name(t),
                GemmBackend::for_device(Device::cpu()).native_16bit(t) ? "oneDNN 16-bit kernel" : "rounded, fp32 kernel");
    expect_matches_reference(t);
  }
}

// The rounding is real: bf16 inputs give a different product from fp32 ones, by about bf16's precision.
TEST(Gemm, Bf16InputsDifferFromFp32ByTheRounding) {
  const int64_t m = 16, n = 16, k = 64;
  auto a = random_vector(m * k, 5), b = random_vector(k * n, 6);
  std::vector<float> c32(m * n), c16(m * n);
  gemm({Trans::N, Trans::N, m, n, k, a.data(), k, b.data(), n, c32.data(), n});
  gemm({Trans::N, Trans::N, m, n, k, a.data(), k, b.data(), n, c16.data(), n, 1, 0, nullptr, DType::BF16});
  double worst = 0, sum = 0;
  for (int64_t i = 0; i < m * n; ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(c32[i]) - c16[i]));
    sum += std::abs(c32[i]);
  }
  EXPECT_GT(worst, 0.0);
  EXPECT_LT(worst, 0.05 * sum / (m * n) + 1e-2);
}

TEST(Linear, BackwardMatchesFiniteDifferences) {
  const int64_t rows = 6, in = 5, out = 4;
  auto x = random_vector(rows * in, 10), w = random_vector(out * in, 11), b = random_vector(out, 12);
  auto r = random_vector(rows * out, 13);  // L = sum(y * r)
  auto loss = [&](const std::vector<double>& xd, const std::vector<double>& wd, const std::vector<double>& bd) {
    double l = 0;
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t o = 0; o < out; ++o) {
        double y = bd[o];
        for (int64_t i = 0; i < in; ++i) y += xd[t * in + i] * wd[o * in + i];
        l += y * r[t * out + o];
      }
    return l;
  };
  auto xd = testing::to_double(x), wd = testing::to_double(w), bd = testing::to_double(b);
  auto gx = testing::numeric_gradient([&](const std::vector<double>& v) { return loss(v, wd, bd); }, xd);
  auto gw = testing::numeric_gradient([&](const std::vector<double>& v) { return loss(xd, v, bd); }, wd);
  auto gb = testing::numeric_gradient([&](const std::vector<double>& v) { return loss(xd, wd, v); }, bd);

  std::vector<float> y(rows * out), dx(rows * in), dw(out * in, 0.5f), db(out, 0.25f);
  linear_forward(x.data(), w.data(), b.data(), y.data(), rows, in, out);
  linear_backward(r.data(), x.data(), w.data(), dx.data(), dw.data(), db.data(), rows, in, out);
  for (auto& v : gw) v += 0.5;  // dw and db accumulate into what was there
  for (auto& v : gb) v += 0.25;
  EXPECT_LE(max_scaled_error(dx, gx, 1e-5, 1e-4), 1.0);
  EXPECT_LE(max_scaled_error(dw, gw, 1e-5, 1e-4), 1.0);
  EXPECT_LE(max_scaled_error(db, gb, 1e-5, 1e-4), 1.0);
  // accumulate_dx adds to dx instead of overwriting it.
  std::vector<float> dx2(dx);
  linear_backward(r.data(), x.data(), w.data(), dx2.data(), nullptr, nullptr, rows, in, out, true);
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_FLOAT_EQ(dx2[i], 2 * dx[i]);
}

}  // namespace
}  // namespace tessera::kernels
