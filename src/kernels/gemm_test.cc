#include "kernels/gemm.h"

#include <gtest/gtest.h>

#include <cstring>

#include <cmath>
#include <string>

#include "core/testing.h"
#include "kernels/cpu/activations.h"
#include "kernels/cpu/linear.h"
#include "kernels/precision.h"

namespace tessera::kernels {
namespace {

// The CPU implementations over host buffers (kernels/cpu/), beside the tensor entry points.
using namespace cpu;

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

double gelu64(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }

// Every matrix of a strided batch, with the epilogue, in float64: C_i = epi(alpha op(A_i) op(B_i) + beta C_i).
std::vector<double> reference_batched(const GemmArgs& g, const std::vector<float>& c0) {
  std::vector<double> c(c0.begin(), c0.end());
  const GemmEpilogue e = g.effective_epilogue();
  for (int64_t bi = 0; bi < g.batch; ++bi) {
    GemmArgs one = g;
    one.a += bi * g.stride_a;
    one.b += bi * g.stride_b;
    one.bias = nullptr;
    const int64_t off = bi * g.stride_c;
    std::vector<float> slice(c0.begin() + off, c0.begin() + off + (g.m - 1) * g.ldc + g.n);
    std::vector<double> r = reference_gemm(one, slice);
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        double x = r[i * g.ldc + j];
        if (e == GemmEpilogue::Bias || e == GemmEpilogue::BiasGeluTanh) x += g.bias[bi * g.stride_bias + j];
        if (e == GemmEpilogue::GeluTanh || e == GemmEpilogue::BiasGeluTanh) x = gelu64(x);
        c[off + i * g.ldc + j] = x;
      }
  }
  return c;
}

struct BatchedCase {
  Trans ta, tb;
  int64_t batch, m, n, k;
  float alpha, beta;
  GemmEpilogue epilogue;
  bool share_a, share_b;  // batch stride 0: one matrix for the whole batch
  bool own_bias = false;  // a bias per matrix (GemmArgs::stride_bias)
};

void expect_batched_matches_reference(DType input_type) {
  const std::vector<BatchedCase> cases = {
      {Trans::N, Trans::N, 3, 5, 7, 4, 1, 0, GemmEpilogue::None, false, false},
      {Trans::N, Trans::T, 4, 17, 9, 33, 1, 0, GemmEpilogue::Bias, false, false},
      {Trans::T, Trans::N, 2, 16, 24, 8, 0.5f, 1, GemmEpilogue::BiasGeluTanh, false, false},  // beta = 1: accumulate
      {Trans::T, Trans::T, 3, 9, 13, 12, 1, 0, GemmEpilogue::GeluTanh, false, true},        // B shared
      {Trans::N, Trans::T, 5, 6, 11, 7, 2, 0.25f, GemmEpilogue::Bias, true, false},         // A shared
      {Trans::N, Trans::N, 1, 31, 19, 21, 0.5f, 1, GemmEpilogue::BiasGeluTanh, false, false},  // batch of 1
      {Trans::N, Trans::N, 2, 4, 6, 0, 1, 1, GemmEpilogue::BiasGeluTanh, false, false},     // k = 0
      {Trans::N, Trans::T, 3, 8, 5, 6, 1, 1, GemmEpilogue::Bias, false, false},             // bias and beta
      {Trans::T, Trans::N, 1, 12, 10, 9, 1, 0.5f, GemmEpilogue::BiasGeluTanh, false, false},
      {Trans::N, Trans::T, 4, 7, 9, 5, 1, 0, GemmEpilogue::Bias, false, false, true},  // the grouped experts' fc1
      {Trans::N, Trans::N, 3, 6, 8, 4, 0.5f, 0, GemmEpilogue::BiasGeluTanh, false, true, true},
      {Trans::N, Trans::N, 2, 4, 6, 0, 1, 1, GemmEpilogue::Bias, false, false, true},  // k = 0
  };
  uint64_t seed = 100;
  for (const BatchedCase& cs : cases) {
    const int64_t a_rows = cs.ta == Trans::N ? cs.m : cs.k, a_cols = cs.ta == Trans::N ? cs.k : cs.m;
    const int64_t b_rows = cs.tb == Trans::N ? cs.k : cs.n, b_cols = cs.tb == Trans::N ? cs.n : cs.k;
    const int64_t lda = a_cols + 2, ldb = b_cols + 1, ldc = cs.n + 3;
    // Batch strides with a gap between matrices, so that a stride mix-up reads the wrong numbers.
    const int64_t stride_a = cs.share_a ? 0 : a_rows * lda + 5, stride_b = cs.share_b ? 0 : b_rows * ldb + 3;
    const int64_t stride_c = cs.m * ldc + 7;
    auto a = random_vector(std::max<int64_t>(1, (cs.share_a ? 1 : cs.batch) * (a_rows * lda + 5)), ++seed);
    auto b = random_vector(std::max<int64_t>(1, (cs.share_b ? 1 : cs.batch) * (b_rows * ldb + 3)), ++seed);
    auto c = random_vector(cs.batch * stride_c, ++seed);
    const int64_t stride_bias = cs.own_bias ? cs.n + 2 : 0;
    auto bias = random_vector(cs.n + (cs.batch - 1) * stride_bias, ++seed);
    const bool has_bias = cs.epilogue == GemmEpilogue::Bias || cs.epilogue == GemmEpilogue::BiasGeluTanh;
    GemmArgs g;
    g.trans_a = cs.ta;
    g.trans_b = cs.tb;
    g.m = cs.m;
    g.n = cs.n;
    g.k = cs.k;
    g.a = a.data();
    g.lda = lda;
    g.b = b.data();
    g.ldb = ldb;
    g.c = c.data();
    g.ldc = ldc;
    g.alpha = cs.alpha;
    g.beta = cs.beta;
    g.bias = has_bias ? bias.data() : nullptr;
    g.input_type = input_type;
    g.epilogue = cs.epilogue;
    g.batch = cs.batch;
    g.stride_a = stride_a;
    g.stride_b = stride_b;
    g.stride_c = stride_c;
    g.stride_bias = stride_bias;
    const std::vector<float> before = c;
    const auto expected = reference_batched(g, c);
    gemm(g);
    for (int64_t bi = 0; bi < cs.batch; ++bi)
      for (int64_t i = 0; i < cs.m; ++i)
        for (int64_t j = 0; j < ldc && bi * stride_c + i * ldc + j < static_cast<int64_t>(c.size()); ++j) {
          const int64_t at = bi * stride_c + i * ldc + j;
          if (j < cs.n)
            ASSERT_NEAR(c[at], expected[at], 1e-4 * (1 + std::abs(expected[at])))
                << dtype_name(input_type) << " " << gemm_epilogue_name(cs.epilogue) << " batch " << bi << " at " << i
                << "," << j;
          else  // padding columns and the gaps between matrices are never written
            ASSERT_EQ(c[at], before[at]) << "batch " << bi << " row " << i << " column " << j;
        }
  }
}

TEST(Gemm, BatchedWithEpiloguesMatchesFloat64Reference) { expect_batched_matches_reference(DType::F32); }

TEST(Gemm, BatchedWithEpiloguesSixteenBitInputsMatchTheReferenceOfTheRoundedInputs) {
  expect_batched_matches_reference(DType::BF16);
  expect_batched_matches_reference(DType::F16);
}

// The fused GELU epilogue is bitwise a GEMM with a bias followed by kernels::gelu_forward, so a model can
// fuse it without changing its numbers.
TEST(Gemm, BiasGeluEpilogueIsBitwiseGemmThenGelu) {
  const int64_t m = 37, n = 29, k = 45;
  auto a = random_vector(m * k, 21), b = random_vector(n * k, 22), bias = random_vector(n, 23);
  for (DType t : {DType::F32, DType::BF16}) {
    std::vector<float> fused(m * n), unfused(m * n);
    GemmArgs g{Trans::N, Trans::T, m, n, k, a.data(), k, b.data(), k, unfused.data(), n, 1, 0, bias.data(), t};
    gemm(g);
    gelu_forward(unfused.data(), unfused.data(), m * n);
    g.c = fused.data();
    g.epilogue = GemmEpilogue::BiasGeluTanh;
    gemm(g);
    EXPECT_EQ(0, std::memcmp(fused.data(), unfused.data(), fused.size() * sizeof(float))) << dtype_name(t);
  }
}

// The new fields' defaults are the GEMM as it was: a batch of 1, no epilogue but the legacy bias, fp32
// buffers, the CPU stream.
TEST(Gemm, DefaultsAreThePlainGemm) {
  GemmArgs g;
  EXPECT_EQ(g.batch, 1);
  EXPECT_EQ(g.epilogue, GemmEpilogue::None);
  EXPECT_EQ(g.a_type, DType::F32);
  EXPECT_EQ(g.b_type, DType::F32);
  EXPECT_EQ(g.c_type, DType::F32);
  EXPECT_EQ(g.stream.device, Device::cpu());
  EXPECT_TRUE(g.stream.is_default());
  const float bias = 1;
  g.bias = &bias;
  EXPECT_EQ(g.effective_epilogue(), GemmEpilogue::Bias);
}

void expect_error(const GemmArgs& g, const std::string& text) {
  try {
    gemm(g);
    ADD_FAILURE() << "expected an error containing '" << text << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

TEST(Gemm, UnsupportedArgumentsAreClearErrors) {
  std::vector<float> a(64, 1), b(64, 1), c(256, 0), bias(8, 0);
  const GemmArgs ok{Trans::N, Trans::N, 4, 4, 4, a.data(), 4, b.data(), 4, c.data(), 4};
  GemmArgs g = ok;
  g.a_type = DType::BF16;
  expect_error(g, "the CPU backend takes fp32 buffers, got a_type=bf16");
  g = ok;
  g.c_type = DType::F16;
  expect_error(g, "c_type=fp16");
  g = ok;
  g.epilogue = GemmEpilogue::BiasGeluTanh;
  expect_error(g, "epilogue bias+gelu_tanh needs a bias");
  g = ok;
  g.epilogue = GemmEpilogue::GeluTanh;
  g.bias = bias.data();
  expect_error(g, "epilogue gelu_tanh takes no bias");
  g = ok;
  g.batch = 0;
  expect_error(g, "batch must be at least 1");
  g = ok;
  g.batch = 2;
  g.stride_c = 10;  // matrix 0 spans 3 * 4 + 4 = 16 elements
  expect_error(g, "overlap");
  g.stride_c = 16;
  g.stride_a = -1;
  expect_error(g, "negative batch stride");
  g = ok;
  g.stream = Stream::default_for(Device{DeviceType::CUDA, 0});
  expect_error(g, "GEMM on cuda:0 is not available");
  EXPECT_THROW(GemmBackend::for_device(Device::cpu()).gemm(g), Error);  // the CPU backend refuses it too
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
