// The per-element functions shared by host and device (kernels/math/*.h, core/philox.h) against
// float64 references, one element at a time, as a GPU thread calls them. The CPU kernels' own tests
// cover them inside the loops; tests/host_device_headers.sh proves nvcc compiles them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "core/philox.h"
#include "kernels/math/activations.h"
#include "kernels/math/adamw.h"
#include "kernels/math/dropout.h"
#include "kernels/math/rotary.h"
#include "kernels/math/softmax.h"

namespace tessera::kernels::math {
namespace {

double gelu64(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }
double sigmoid64(double x) { return 1 / (1 + std::exp(-x)); }

TEST(SharedMath, GeluTanhAndItsDerivative) {
  for (double x = -12; x <= 12; x += 0.173) {
    const float xf = static_cast<float>(x);
    EXPECT_NEAR(gelu_tanh(xf), gelu64(xf), 2e-6 * (1 + std::abs(x))) << x;
    const double h = 1e-5, d = (gelu64(xf + h) - gelu64(xf - h)) / (2 * h);
    EXPECT_NEAR(gelu_tanh_backward(xf, 1.5f), 1.5 * d, 1e-5) << x;
  }
}

TEST(SharedMath, SwigluAndItsGradients) {
  for (double g = -9; g <= 9; g += 0.37)
    for (double up : {-2.0, 0.5, 3.0}) {
      const float gf = static_cast<float>(g), uf = static_cast<float>(up);
      const double y = gf * sigmoid64(gf) * uf;
      EXPECT_NEAR(swiglu(gf, uf), y, 1e-5 * (1 + std::abs(y)));
      float dgate = 0, dup = 0;
      swiglu_backward(gf, uf, 0.75f, dgate, dup);
      const double s = sigmoid64(gf);
      EXPECT_NEAR(dgate, 0.75 * uf * s * (1 + gf * (1 - s)), 1e-5 * (1 + std::abs(uf)));
      EXPECT_NEAR(dup, 0.75 * gf * s, 1e-5 * (1 + std::abs(g)));
    }
}

TEST(SharedMath, RopePairRotatesAndBackwardIsTheTranspose) {
  const int64_t rot_dim = 16;
  for (int64_t i = 0; i < rot_dim / 2; ++i) {
    const double inv = rope_inv_freq(i, rot_dim, 10000.0f);
    EXPECT_DOUBLE_EQ(inv, std::pow(10000.0, -2.0 * i / rot_dim));
    for (double pos : {0.0, 1.0, 37.0, 4095.0}) {
      float c, s;
      rope_cos_sin(pos, inv, 1.0, c, s);
      const double angle = pos * inv;
      EXPECT_NEAR(c, std::cos(angle), 1e-7);
      EXPECT_NEAR(s, std::sin(angle), 1e-7);
      float a = 0.3f, b = -1.7f;
      rope_rotate_pair(a, b, c, s);
      EXPECT_NEAR(a, 0.3 * std::cos(angle) + 1.7 * std::sin(angle), 1e-6);
      EXPECT_NEAR(b, -1.7 * std::cos(angle) + 0.3 * std::sin(angle), 1e-6);
      rope_rotate_pair_backward(a, b, c, s);  // R^T R = I
      EXPECT_NEAR(a, 0.3, 1e-6);
      EXPECT_NEAR(b, -1.7, 1e-6);
    }
  }
}

TEST(SharedMath, AdamWUpdateOfOneElement) {
  const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
  const int t = 3;
  AdamWCoeffs k{static_cast<float>(1 - lr * wd), static_cast<float>(lr / (1 - std::pow(b1, t))),
                static_cast<float>(1 / std::sqrt(1 - std::pow(b2, t))), 0.9f, 0.1f, 0.95f, 0.05f, 1e-8f, 1.0f};
  float p = 0.5f, m = 0.02f, v = 0.003f;
  const float g = -0.4f;
  adamw_update_one(p, g, m, v, k);
  const double m64 = b1 * 0.02 + (1 - b1) * g, v64 = b2 * 0.003 + (1 - b2) * g * g;
  const double p64 = 0.5 * (1 - lr * wd) - lr / (1 - std::pow(b1, t)) * m64 / (std::sqrt(v64 / (1 - std::pow(b2, t))) + eps);
  EXPECT_NEAR(m, m64, 1e-7);
  EXPECT_NEAR(v, v64, 1e-8);
  EXPECT_NEAR(p, p64, 1e-6);
}

TEST(SharedMath, DropoutKeyingMatchesPhiloxStream) {
  const PhiloxStream rng(1234, 99);
  int kept = 0;
  for (uint64_t i = 0; i < 4000; ++i) {
    const bool keep = dropout_keeps(rng.bits(i), 0.25f);
    EXPECT_EQ(keep, rng.uniform(i) >= 0.25f) << i;
    kept += keep;
  }
  EXPECT_NEAR(kept / 4000.0, 0.75, 0.03);
  // A block made round by round equals generate's.
  uint32_t c[4] = {7, 0, 99, 0}, k0 = 1234, k1 = 0;
  for (int r = 0; r < 10; ++r, k0 += Philox4x32::kW0, k1 += Philox4x32::kW1)
    Philox4x32::apply_round(c[0], c[1], c[2], c[3], k0, k1);
  const Philox4x32::Block b = rng.block(7);
  for (int w = 0; w < 4; ++w) EXPECT_EQ(c[w], b.v[w]);

  DropoutRegion r{4, 2, 10, 3, 20, 5};  // local (s, b, h) of a [samples, 20, 10] global tensor
  EXPECT_EQ(dropout_element(r, 1, 1, 7), static_cast<uint64_t>(((5 + 1) * 20 + 3 + 1) * 10 + 7));
  AttentionDropout d{0.1f, 1, 2, 3, 4, 16};
  EXPECT_EQ(attention_dropout_row(d, 32, 1, 2, 5), static_cast<uint64_t>((((3 + 1) * 16 + 4 + 2) * 32 + 5) * 32));
}

TEST(SharedMath, SoftmaxStatisticsMergeAsOneRow) {
  const float x[] = {1.5f, -3.0f, 7.25f, 0.0f, -INFINITY, 6.0f, 2.0f};
  const int n = 7;
  double max64 = -INFINITY, sum64 = 0;
  for (float v : x) max64 = std::max(max64, static_cast<double>(v));
  for (float v : x) sum64 += std::exp(v - max64);
  // Any split point: the statistics of the two parts merge into the row's.
  for (int split = 0; split <= n; ++split) {
    auto stats = [&](int lo, int hi) {  // one part's statistics, as a tile of attention keeps them
      SoftmaxStats st{-INFINITY, 0.0f};
      for (int j = lo; j < hi; ++j) st.max = std::max(st.max, x[j]);
      for (int j = lo; j < hi; ++j) st.sum += softmax_weight(x[j], softmax_safe_shift(st.max));
      return st;
    };
    const SoftmaxStats a = stats(0, split), b = stats(split, n);
    const SoftmaxStats all = softmax_merge(a, b);
    EXPECT_EQ(all.max, static_cast<float>(max64)) << split;
    EXPECT_NEAR(all.sum, sum64, 1e-6 * sum64) << split;
    EXPECT_NEAR(softmax_lse(all.max, all.sum), max64 + std::log(sum64), 1e-6) << split;
  }
  const SoftmaxStats none = softmax_merge({-INFINITY, 0.0f}, {-INFINITY, 0.0f});
  EXPECT_EQ(none.max, -INFINITY);
  EXPECT_EQ(none.sum, 0.0f);
  // Cross-entropy's gradient: softmax minus the one-hot target, times the loss gradient.
  const float lse = static_cast<float>(max64 + std::log(sum64));
  EXPECT_NEAR(cross_entropy_dlogit(x[0], lse, 2.0f), 2 * std::exp(x[0] - (max64 + std::log(sum64))), 1e-6);
  EXPECT_NEAR(cross_entropy_dlogit_target(x[2], lse, 2.0f), 2 * (std::exp(x[2] - (max64 + std::log(sum64))) - 1), 1e-6);
}

}  // namespace
}  // namespace tessera::kernels::math
