#include "kernels/gemm_column_major.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/check.h"

namespace tessera::kernels {
namespace {

// The row-major product gemm.h defines, in float64 (epilogues None and Bias).
std::vector<double> row_major_reference(const GemmArgs& g, size_t c_size) {
  std::vector<double> c(c_size, 0.0);
  for (size_t i = 0; i < c_size; ++i) c[i] = g.c[i];
  for (int64_t s = 0; s < g.batch; ++s) {
    const float* a = g.a + s * g.stride_a;
    const float* b = g.b + s * g.stride_b;
    for (int64_t i = 0; i < g.m; ++i) {
      for (int64_t j = 0; j < g.n; ++j) {
        double sum = 0;
        for (int64_t l = 0; l < g.k; ++l) {
          const double x = g.trans_a == Trans::N ? a[i * g.lda + l] : a[l * g.lda + i];
          const double y = g.trans_b == Trans::N ? b[l * g.ldb + j] : b[j * g.ldb + l];
          sum += x * y;
        }
        double& out = c[s * g.stride_c + i * g.ldc + j];
        out = g.alpha * sum + g.beta * out;
        if (g.bias) out += g.bias[s * g.stride_bias + j];
      }
    }
  }
  return c;
}

// What cublasLtMatmul computes from a ColumnMajorGemm, read as its documentation defines the operands:
// element (r, q) of a column-major operand is data[r + q * ld]; op transposes it; D(i, j) is at
// d[i + j * ldc]; the bias vector has one value per row i of D.
std::vector<double> column_major_reference(const ColumnMajorGemm& g, const float* c_in, size_t c_size) {
  std::vector<double> d(c_in, c_in + c_size);
  auto at = [](const ColumnMajorOperand& x, int64_t s, int64_t r, int64_t q) -> double {
    const float* p = static_cast<const float*>(x.data) + s * x.stride;
    return x.trans ? p[q + r * x.ld] : p[r + q * x.ld];  // op(X)(r, q)
  };
  for (int64_t s = 0; s < g.batch; ++s) {
    for (int64_t i = 0; i < g.m; ++i) {
      for (int64_t j = 0; j < g.n; ++j) {
        double sum = 0;
        for (int64_t l = 0; l < g.k; ++l) sum += at(g.a, s, i, l) * at(g.b, s, l, j);
        double& out = d[s * g.stride_c + i + j * g.ldc];
        out = g.alpha * sum + g.beta * out;
        if (g.bias) out += g.bias[s * g.stride_bias + i];
      }
    }
  }
  return d;
}

std::vector<float> random_floats(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

TEST(GemmColumnMajor, EveryTransposeLeadingDimensionBatchAndBiasGivesTheRowMajorProduct) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> dim(1, 9), pad(0, 3), coin(0, 1), batches(1, 3);
  for (int trial = 0; trial < 300; ++trial) {
    GemmArgs g;
    g.trans_a = coin(rng) ? Trans::T : Trans::N;
    g.trans_b = coin(rng) ? Trans::T : Trans::N;
    g.m = dim(rng), g.n = dim(rng), g.k = dim(rng);
    const int64_t a_rows = g.trans_a == Trans::N ? g.m : g.k, a_row = g.trans_a == Trans::N ? g.k : g.m;
    const int64_t b_rows = g.trans_b == Trans::N ? g.k : g.n, b_row = g.trans_b == Trans::N ? g.n : g.k;
    g.lda = a_row + pad(rng), g.ldb = b_row + pad(rng), g.ldc = g.n + pad(rng);
    g.batch = batches(rng);
    // A batch shares A or B (stride 0) or strides past the matrix with a gap.
    g.stride_a = coin(rng) ? 0 : a_rows * g.lda + pad(rng);
    g.stride_b = coin(rng) ? 0 : b_rows * g.ldb + pad(rng);
    g.stride_c = g.m * g.ldc + pad(rng);
    const bool with_bias = coin(rng);
    g.stride_bias = with_bias && coin(rng) ? g.n : 0;
    g.alpha = coin(rng) ? 1.0f : 0.5f;
    g.beta = coin(rng) ? 0.0f : -2.0f;
    auto a = random_floats(g.stride_a * (g.batch - 1) + a_rows * g.lda, rng);
    auto b = random_floats(g.stride_b * (g.batch - 1) + b_rows * g.ldb, rng);
    auto c = random_floats(g.stride_c * g.batch, rng);
    auto bias = random_floats(g.stride_bias * (g.batch - 1) + g.n, rng);
    g.a = a.data(), g.b = b.data(), g.c = c.data();
    if (with_bias) g.bias = bias.data();

    const ColumnMajorGemm cm = to_column_major(g);
    EXPECT_EQ(cm.m, g.n);
    EXPECT_EQ(cm.n, g.m);
    // The operands' described shapes are what op() needs: op(A') is m' x k', op(B') is k' x n'.
    EXPECT_EQ(cm.a.trans ? cm.a.cols : cm.a.rows, cm.m);
    EXPECT_EQ(cm.a.trans ? cm.a.rows : cm.a.cols, cm.k);
    EXPECT_EQ(cm.b.trans ? cm.b.cols : cm.b.rows, cm.k);
    EXPECT_EQ(cm.b.trans ? cm.b.rows : cm.b.cols, cm.n);
    EXPECT_GE(cm.a.ld, cm.a.rows);
    EXPECT_GE(cm.b.ld, cm.b.rows);
    EXPECT_EQ(cm.epilogue, with_bias ? GemmEpilogue::Bias : GemmEpilogue::None);
    const auto expected = row_major_reference(g, c.size());
    const auto got = column_major_reference(cm, c.data(), c.size());
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], expected[i], 1e-12) << "trial " << trial << " element " << i;
    }
  }
}

// The batched-GEMM attention's strided batches (kernels/gemm_attention.cc): matrices that interleave,
// matrix t at t * w with rows batch * w apart (the sequence-major [seq, batch * heads, d] activations),
// as inputs and as the output, for every transpose. The column-major form keeps each operand's batch
// stride below ld * cols as it is (cuBLASLt's layouts allow it: only ld >= rows is required), and
// computes the same product.
TEST(GemmColumnMajor, InterleavedBatchesGiveTheRowMajorProduct) {
  std::mt19937 rng(8);
  const int64_t batch = 3, m = 5, n = 4, k = 6;
  for (Trans ta : {Trans::N, Trans::T})
    for (Trans tb : {Trans::N, Trans::T}) {
      GemmArgs g;
      g.trans_a = ta, g.trans_b = tb;
      g.m = m, g.n = n, g.k = k, g.batch = batch;
      const int64_t a_rows = ta == Trans::N ? m : k, a_row = ta == Trans::N ? k : m;
      const int64_t b_rows = tb == Trans::N ? k : n, b_row = tb == Trans::N ? n : k;
      g.lda = batch * a_row, g.stride_a = a_row;
      g.ldb = batch * b_row, g.stride_b = b_row;
      g.ldc = batch * n, g.stride_c = n;
      g.beta = 1.0f;  // dK and dV accumulate over a group's query heads
      auto a = random_floats(a_rows * g.lda, rng), b = random_floats(b_rows * g.ldb, rng);
      auto c = random_floats(m * g.ldc, rng);
      g.a = a.data(), g.b = b.data(), g.c = c.data();
      const ColumnMajorGemm cm = to_column_major(g);
      EXPECT_LT(cm.a.stride, cm.a.ld * cm.a.cols);
      EXPECT_LT(cm.stride_c, cm.ldc * cm.n);
      const auto expected = row_major_reference(g, c.size());
      const auto got = column_major_reference(cm, c.data(), c.size());
      for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], expected[i], 1e-12) << "element " << i;
    }
}

TEST(GemmColumnMajor, ArgumentsThatDescribeNoProductAreErrors) {
  std::vector<float> x(64);
  GemmArgs g;
  g.m = 2, g.n = 3, g.k = 4;
  g.a = x.data(), g.b = x.data(), g.c = x.data();
  g.lda = 4, g.ldb = 3, g.ldc = 3;
  EXPECT_NO_THROW(to_column_major(g));
  g.lda = 3;
  EXPECT_THROW(to_column_major(g), Error);  // a row of A holds k = 4
  g.lda = 4;
  g.trans_b = Trans::T;  // B stored n x k: rows of 4
  EXPECT_THROW(to_column_major(g), Error);
  g.ldb = 4;
  EXPECT_NO_THROW(to_column_major(g));
  g.ldc = 2;
  EXPECT_THROW(to_column_major(g), Error);
  g.ldc = 3;
  g.epilogue = GemmEpilogue::BiasGeluTanh;  // without a bias
  EXPECT_THROW(to_column_major(g), Error);
  g.bias = x.data();
  EXPECT_EQ(to_column_major(g).epilogue, GemmEpilogue::BiasGeluTanh);
  g.epilogue = GemmEpilogue::GeluTanh;  // with one
  EXPECT_THROW(to_column_major(g), Error);
}

}  // namespace
}  // namespace tessera::kernels
