#include "kernels/cpu/adamw.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/testing.h"

namespace tessera::kernels {
namespace {

// The CPU implementations over host buffers (kernels/cpu/), beside the tensor entry points.
using namespace cpu;

// float64 torch.optim.AdamW step (decoupled decay first, bias corrections with step t >= 1).
struct RefAdamW {
  std::vector<double> p, m, v;
  void step(const std::vector<float>& g, const AdamWHyper& h) {
    double b1 = h.beta1, b2 = h.beta2, t = static_cast<double>(h.step);
    double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] *= 1 - static_cast<double>(h.lr) * h.weight_decay;
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      p[i] -= h.lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + h.eps);
    }
  }
};

void expect_steps_match_reference(float weight_decay) {
  const int64_t n = 10007;  // not a multiple of the SIMD width or the chunk size
  std::vector<float> p = testing::random_vector(n, 1), m(n, 0.0f), v(n, 0.0f);
  RefAdamW ref{testing::to_double(p), std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
  AdamWHyper h;
  h.lr = 1e-2f;
  h.weight_decay = weight_decay;
  for (int64_t t = 1; t <= 5; ++t) {
    h.step = t;
    std::vector<float> g = testing::random_vector(n, 100 + t, -2.0f, 2.0f);
    g[3] = 0.0f;  // zero gradient: only decay and momentum move it
    adamw_step(p.data(), g.data(), m.data(), v.data(), n, h);
    ref.step(g, h);
    EXPECT_LE(testing::max_scaled_error(p, ref.p, 1e-6, 1e-5), 1.0) << "step " << t << " wd " << weight_decay;
    EXPECT_LE(testing::max_scaled_error(m, ref.m, 1e-7, 1e-5), 1.0) << "step " << t;
    EXPECT_LE(testing::max_scaled_error(v, ref.v, 1e-9, 1e-5), 1.0) << "step " << t;
  }
}

TEST(AdamW, MatchesFloat64TorchReference) {
  expect_steps_match_reference(0.1f);
  expect_steps_match_reference(0.0f);
}

// With bias correction, the first step moves every weight by lr * sign(g) (for |g| >> eps), and
// decay multiplies by 1 - lr * wd before it.
TEST(AdamW, FirstStepIsSignOfGradient) {
  std::vector<float> p = {1.0f, 1.0f, -2.0f}, g = {0.5f, -3.0f, 1e-3f}, m(3, 0.0f), v(3, 0.0f);
  AdamWHyper h;
  h.lr = 0.1f;
  h.weight_decay = 0.5f;
  adamw_step(p.data(), g.data(), m.data(), v.data(), 3, h);
  EXPECT_NEAR(p[0], 1.0 * 0.95 - 0.1, 1e-6);
  EXPECT_NEAR(p[1], 1.0 * 0.95 + 0.1, 1e-6);
  EXPECT_NEAR(p[2], -2.0 * 0.95 - 0.1, 1e-5);
  h.step = 0;
  EXPECT_THROW(adamw_step(p.data(), g.data(), m.data(), v.data(), 3, h), Error);
}

// The clipping factor applied inside the step is the same float multiply as scaling the gradient
// beforehand, so the two give the same bits, and the gradient buffer is left unscaled.
TEST(AdamW, GradScaleEqualsPrescaledGradientBitwise) {
  const int64_t n = 10007;
  const float scale = 0.37f;
  std::vector<float> p1 = testing::random_vector(n, 7), m1(n, 0.0f), v1(n, 0.0f);
  std::vector<float> p2 = p1, m2 = m1, v2 = v1;
  AdamWHyper h;
  h.lr = 1e-2f;
  h.weight_decay = 0.1f;
  for (int64_t t = 1; t <= 3; ++t) {
    h.step = t;
    const std::vector<float> g = testing::random_vector(n, 200 + t, -2.0f, 2.0f);
    std::vector<float> scaled = g;
    for (float& x : scaled) x *= scale;
    h.grad_scale = 1.0f;
    adamw_step(p1.data(), scaled.data(), m1.data(), v1.data(), n, h);
    h.grad_scale = scale;
    std::vector<float> g_copy = g;
    adamw_step(p2.data(), g_copy.data(), m2.data(), v2.data(), n, h);
    EXPECT_EQ(g_copy, g);
  }
  EXPECT_EQ(p1, p2);
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(v1, v2);
}

// Every element gets the same bits whether the SIMD loop or the scalar tail updates it: both round each
// product on its own (no FMA), which is also what makes the CUDA kernel's bits the CPU's.
TEST(AdamW, ScalarTailEqualsTheSimdLoopBitwise) {
  const int64_t n = 64;
  std::vector<float> p1 = testing::random_vector(n, 11), m1 = testing::random_vector(n, 12, -0.1f, 0.1f);
  std::vector<float> v1 = testing::random_vector(n, 13, 0.0f, 0.01f);
  std::vector<float> p2 = p1, m2 = m1, v2 = v1;
  AdamWHyper h;
  h.lr = 1e-3f;
  h.weight_decay = 0.1f;
  h.grad_scale = 0.37f;
  for (int64_t t = 1; t <= 3; ++t) {
    h.step = t;
    std::vector<float> g = testing::random_vector(n, 300 + t, -2.0f, 2.0f);
    adamw_step(p1.data(), g.data(), m1.data(), v1.data(), n, h);
    for (int64_t i = 0; i < n; ++i) adamw_step(&p2[i], &g[i], &m2[i], &v2[i], 1, h);  // the scalar path
  }
  EXPECT_EQ(p1, p2);
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(v1, v2);
}

TEST(AdamW, SumOfSquaresMatchesFloat64) {
  for (int64_t n : {0, 1, 7, 8193, 1000003}) {
    std::vector<float> x = testing::random_vector(n, 2, -3.0f, 3.0f);
    double ref = 0;
    for (float v : x) ref += static_cast<double>(v) * v;
    EXPECT_NEAR(sum_of_squares(x.data(), n), ref, 1e-12 * ref) << n;
  }
}

TEST(AdamW, SumOfSquaresIsBitwiseIndependentOfThreadCount) {
  const int64_t n = 1000003;
  std::vector<float> x = testing::random_vector(n, 3, -3.0f, 3.0f);
  int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  double one = sum_of_squares(x.data(), n);
  omp_set_num_threads(2);
  double two = sum_of_squares(x.data(), n);
  omp_set_num_threads(3);
  double three = sum_of_squares(x.data(), n);
  omp_set_num_threads(saved);
  EXPECT_EQ(one, two);
  EXPECT_EQ(one, three);
}

}  // namespace
}  // namespace tessera::kernels
