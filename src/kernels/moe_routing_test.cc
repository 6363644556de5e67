// The MoE routing kernels (kernels/moe_routing.h) through their tensor entry points: hand-computed
// routing on a small [8, 4] matrix, the losses against float64 references written here, gradients
// against central differences of those references. Capacity, rows, jitter and thread-count independence
// are in moe_rows_test.cc.
#include "kernels/moe_routing.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/check.h"
#include "core/fake_device_testing.h"
#include "core/philox.h"
#include "core/testing.h"
#include "kernels/dropout.h"
#include "kernels/moe_routing_testing.h"

namespace tessera::kernels {
namespace {

using testing::max_scaled_error;
using testing::numeric_gradient;
using testing::random_vector;
using testing::to_double;
using Vec = std::vector<double>;
using Score = RouterScoreFunction;
using namespace moe_testing;


// got within rel of want, relative to want's largest magnitude (and to each element's).
void expect_close(const std::vector<float>& got, const Vec& want, double rel, const std::string& what) {
  double big = 0;
  for (double w : want) big = std::max(big, std::abs(w));
  EXPECT_LE(max_scaled_error(got, want, rel * big + 1e-30, rel), 1.0) << what;
}

// ---- float64 references (Megatron's formulas) ----

double sig(double x) { return 1 / (1 + std::exp(-x)); }

Vec softmax64(const double* x, int64_t n) {
  double m = *std::max_element(x, x + n), s = 0;
  Vec p(n);
  for (int64_t i = 0; i < n; ++i) s += p[i] = std::exp(x[i] - m);
  for (double& v : p) v /= s;
  return p;
}

// The aux loss's scores: softmax, or sigmoid over its sum + 1e-20.
Vec aux_scores64(const double* x, int64_t n, Score score) {
  if (score == Score::Softmax) return softmax64(x, n);
  Vec q(n);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += q[i] = sig(x[i]);
  for (double& v : q) v /= s + 1e-20;
  return q;
}

// The router's probs of one row for the experts idx[0, k), held fixed.
Vec router_probs64(const double* x, int64_t E, const int32_t* idx, const TopkRouterOptions& opt) {
  const int64_t k = opt.topk;
  Vec p(k);
  if (opt.score == Score::Softmax && !opt.pre_softmax) {
    Vec v(k);
    for (int64_t j = 0; j < k; ++j) v[j] = x[idx[j]];
    p = softmax64(v.data(), k);
  } else if (opt.score == Score::Softmax) {
    Vec full = softmax64(x, E);
    for (int64_t j = 0; j < k; ++j) p[j] = full[idx[j]];
  } else {
    double s = 0;
    for (int64_t j = 0; j < k; ++j) s += p[j] = sig(x[idx[j]]);
    if (k > 1)
      for (double& v : p) v /= s + 1e-20;
  }
  for (double& v : p) v *= opt.scaling_factor;
  return p;
}

// coeff E / (k G tpg^2) sum_t sum_i p_ti n_{t % G, i}.
double aux_loss64(const Vec& x, int64_t T, int64_t E, const std::vector<float>& counts, int64_t k, Score score,
                  int64_t tpg, double coeff) {
  const int64_t G = static_cast<int64_t>(counts.size()) / E;
  double sum = 0;
  for (int64_t t = 0; t < T; ++t) {
    Vec p = aux_scores64(x.data() + t * E, E, score);
    for (int64_t i = 0; i < E; ++i) sum += p[i] * counts[(t % G) * E + i];
  }
  return coeff * E * sum / (static_cast<double>(k) * G * tpg * tpg);
}

double z_loss64(const Vec& x, int64_t T, int64_t E, double coeff, int64_t total) {
  double sum = 0;
  for (int64_t t = 0; t < T; ++t) {
    const double* r = x.data() + t * E;
    double m = *std::max_element(r, r + E), s = 0;
    for (int64_t i = 0; i < E; ++i) s += std::exp(r[i] - m);
    sum += std::pow(m + std::log(s), 2);
  }
  return coeff * sum / total;
}

// ---- the hand-computed [8, 4] routing ----

constexpr int64_t kT = 8, kE = 4;
const std::vector<float> kLogits = {
    1.0f,  2.0f,  0.5f,  -1.0f,  // top-2: 1, 0
    0.0f,  0.0f,  3.0f,  1.0f,   // 2, 3
    1.0f,  1.0f,  1.0f,  1.0f,   // all tie: 0, 1
    -2.0f, 0.5f,  0.5f,  0.0f,   // 1 and 2 tie: 1, 2
    4.0f,  -1.0f, 2.0f,  2.0f,   // 0, then 2 and 3 tie: 2
    0.0f,  -3.0f, -1.0f, -0.5f,  // 0, 3
    -1.0f, 1.5f,  0.0f,  1.5f,   // 1 and 3 tie: 1, 3
    2.5f,  0.0f,  2.5f,  3.0f,   // 3, then 0 and 2 tie: 0
};
const std::vector<int32_t> kTop2 = {1, 0, 2, 3, 0, 1, 1, 2, 0, 2, 0, 3, 1, 3, 3, 0};
// The chosen logits (a, b) of each row, a >= b.
const double kChosen[kT][2] = {{2, 1}, {3, 1}, {1, 1}, {0.5, 0.5}, {4, 2}, {0, -0.5}, {1.5, 1.5}, {3, 2.5}};

struct Routed {
  std::vector<int32_t> indices;
  std::vector<float> probs;
};

Routed route(const std::vector<float>& logits, int64_t T, int64_t E, const TopkRouterOptions& opt) {
  Tensor idx = Tensor::empty({T, opt.topk}, DType::I32), probs = Tensor::empty({T, opt.topk});
  topk_router_forward(f32(logits, {T, E}), opt, Tensor(), idx, probs);
  return {ints(idx), floats(probs)};
}

TEST(TopkRouter, PostSoftmaxTopTwoByHand) {
  Routed r = route(kLogits, kT, kE, {2, Score::Softmax, false, 1.0f});
  EXPECT_EQ(r.indices, kTop2);
  for (int64_t t = 0; t < kT; ++t) {
    const double a = kChosen[t][0], b = kChosen[t][1];  // softmax over the two: sigmoid of the gap
    EXPECT_NEAR(r.probs[2 * t], sig(a - b), 1e-6) << t;
    EXPECT_NEAR(r.probs[2 * t + 1], sig(b - a), 1e-6) << t;
  }
  EXPECT_EQ(r.probs[4], 0.5f);  // the all-tie row splits evenly
}

TEST(TopkRouter, PreSoftmaxIsTheFullSoftmaxNotRenormalised) {
  Routed r = route(kLogits, kT, kE, {2, Score::Softmax, true, 1.0f});
  EXPECT_EQ(r.indices, kTop2);
  for (int64_t t = 0; t < kT; ++t) {
    double z = 0;
    for (int64_t i = 0; i < kE; ++i) z += std::exp(static_cast<double>(kLogits[t * kE + i]));
    EXPECT_NEAR(r.probs[2 * t], std::exp(kChosen[t][0]) / z, 1e-6) << t;
    EXPECT_NEAR(r.probs[2 * t + 1], std::exp(kChosen[t][1]) / z, 1e-6) << t;
    EXPECT_LT(r.probs[2 * t] + r.probs[2 * t + 1], 1.0f) << t;
  }
}

TEST(TopkRouter, SigmoidTopOneAndTopTwo) {
  Routed one = route(kLogits, kT, kE, {1, Score::Sigmoid, false, 1.0f});
  Routed two = route(kLogits, kT, kE, {2, Score::Sigmoid, false, 1.0f});
  EXPECT_EQ(two.indices, kTop2);
  for (int64_t t = 0; t < kT; ++t) {
    const double a = sig(kChosen[t][0]), b = sig(kChosen[t][1]);
    EXPECT_EQ(one.indices[t], kTop2[2 * t]) << t;
    EXPECT_NEAR(one.probs[t], a, 1e-6) << t;  // k = 1: the sigmoid itself
    EXPECT_NEAR(two.probs[2 * t], a / (a + b), 1e-6) << t;
    EXPECT_NEAR(two.probs[2 * t + 1], b / (a + b), 1e-6) << t;
  }
}

TEST(TopkRouter, ScalingFactorMultipliesTheProbs) {
  for (Score score : {Score::Softmax, Score::Sigmoid})
    for (bool pre : {false, true}) {
      Routed plain = route(kLogits, kT, kE, {2, score, pre, 1.0f});
      Routed scaled = route(kLogits, kT, kE, {2, score, pre, 2.5f});
      EXPECT_EQ(plain.indices, scaled.indices);
      for (size_t i = 0; i < plain.probs.size(); ++i) EXPECT_EQ(scaled.probs[i], plain.probs[i] * 2.5f) << i;
    }
}

// Top-1 after the softmax over the one chosen logit is 1 exactly: the router then learns only from
// the aux loss (the reason for --moe-router-pre-softmax with top-1).
TEST(TopkRouter, TopOnePostSoftmaxProbsAreExactlyOne) {
  const int64_t T = 50, E = 7;
  Routed r = route(random_vector(T * E, 3, -4.0f, 4.0f), T, E, {1, Score::Softmax, false, 1.0f});
  for (float p : r.probs) EXPECT_EQ(p, 1.0f);
}

TEST(TopkRouter, RefusesBadOptionsAndIndices) {
  Tensor x = f32(kLogits, {kT, kE}), idx = Tensor::empty({kT, 5}, DType::I32), probs = Tensor::empty({kT, 5});
  EXPECT_THROW(topk_router_forward(x, {5, Score::Softmax, false, 1.0f}, Tensor(), idx, probs), Error);  // k > E
  EXPECT_THROW(topk_router_forward(x, {2, Score::Softmax, false, 1.0f}, Tensor(), idx, probs), Error);  // wrong sizes
  std::vector<int32_t> bad = kTop2;
  bad[3] = 4;
  EXPECT_THROW(topk_router_backward(x, i32(bad, {kT, 2}), f32(std::vector<float>(16, 1.0f), {kT, 2}),
                                    {2, Score::Softmax, false, 1.0f}, Tensor::zeros({kT, kE})),
               Error);
}

// ---- gradients: central differences of the float64 references ----

// Starts dlogits at small nonzero values, so a backward that overwrote instead of adding would fail.
std::vector<float> prefill(int64_t n) { return random_vector(n, 99, -1e-3f, 1e-3f); }

// backward(dlogits) added into `start`; returns what it added.
std::vector<float> added(const std::function<void(const Tensor&)>& backward, int64_t T, int64_t E) {
  const std::vector<float> start = prefill(T * E);
  Tensor d = f32(start, {T, E});
  backward(d);
  std::vector<float> out = floats(d);
  for (size_t i = 0; i < out.size(); ++i) out[i] -= start[i];
  return out;
}

TEST(TopkRouter, BackwardMatchesFiniteDifferencesInEveryScoreMode) {
  const int64_t T = 6, E = 5;
  const std::vector<float> x = random_vector(T * E, 11, -2.0f, 2.0f);
  const std::vector<TopkRouterOptions> modes = {{2, Score::Softmax, false, 1.5f},
                                                {3, Score::Softmax, true, 1.5f},
                                                {2, Score::Sigmoid, false, 1.5f},
                                                {1, Score::Sigmoid, false, 1.5f},
                                                {1, Score::Softmax, true, 1.0f}};
  for (const TopkRouterOptions& opt : modes) {
    const std::string what = "k " + std::to_string(opt.topk) + (opt.score == Score::Sigmoid ? " sigmoid" : " softmax") +
                             (opt.pre_softmax ? " pre" : "");
    Routed r = route(x, T, E, opt);
    const std::vector<float> R = random_vector(T * opt.topk, 12, -1.0f, 1.0f);  // L = sum R * probs
    auto L = [&](const Vec& xd) {
      double s = 0;
      for (int64_t t = 0; t < T; ++t) {
        Vec p = router_probs64(xd.data() + t * E, E, r.indices.data() + t * opt.topk, opt);
        for (int64_t j = 0; j < opt.topk; ++j) s += R[t * opt.topk + j] * p[j];
      }
      return s;
    };
    std::vector<float> got = added(
        [&](const Tensor& d) { topk_router_backward(f32(x, {T, E}), i32(r.indices, {T, opt.topk}),
                                                    f32(R, {T, opt.topk}), opt, d); },
        T, E);
    expect_close(got, numeric_gradient(L, to_double(x)), 1e-5, what);
  }
}

// ---- the load-balancing loss ----

std::vector<float> counts_of(const std::vector<float>& x, int64_t T, int64_t E, int64_t k, Score score,
                             int64_t groups) {
  Tensor c = Tensor::empty({groups, E});
  aux_loss_counts(f32(x, {T, E}), k, score, groups, c);
  return floats(c);
}

double aux(const std::vector<float>& x, int64_t T, int64_t E, const std::vector<float>& counts, int64_t k,
           Score score, int64_t tpg, float coeff) {
  return aux_loss_forward(f32(x, {T, E}), f32(counts, {static_cast<int64_t>(counts.size()) / E, E}), k, score, tpg,
                          coeff);
}

// Uniform scores are perfect balance of the probabilities: E * sum_i (1/E) f_i = 1, so the loss is
// the coefficient exactly, for the whole-batch and the per-sequence forms and both score functions,
// whatever the counts (those the kernel routes, or hand-balanced ones).
TEST(AuxLoss, UniformLogitsGiveTheCoefficientExactly) {
  const int64_t S = 4, B = 2, T = S * B, E = 4, k = 2;
  const float coeff = 0.37f;
  for (float value : {0.0f, 0.7f})
    for (Score score : {Score::Softmax, Score::Sigmoid}) {
      if (score == Score::Sigmoid && value != 0.0f) continue;  // sigmoid(0) = 1/2: its sums are exact
      const std::vector<float> x(T * E, value);
      for (int64_t groups : {int64_t{1}, B}) {
        const int64_t tpg = T / groups;
        EXPECT_EQ(aux(x, T, E, counts_of(x, T, E, k, score, groups), k, score, tpg, coeff),
                  static_cast<double>(coeff))
            << groups;
        const std::vector<float> balanced(groups * E, static_cast<float>(tpg * k / E));
        EXPECT_EQ(aux(x, T, E, balanced, k, score, tpg, coeff), static_cast<double>(coeff)) << groups;
      }
    }
}

TEST(AuxLoss, HandRoutedCountsAndUnbalancedLoss) {
  const Vec x = to_double(kLogits);
  for (Score score : {Score::Softmax, Score::Sigmoid}) {
    // The top-2 of each row as kTop2 (the aux scores keep the logits' order and ties).
    const std::vector<float> whole = counts_of(kLogits, kT, kE, 2, score, 1);
    EXPECT_EQ(whole, (std::vector<float>{5, 4, 3, 4}));
    const std::vector<float> seq = counts_of(kLogits, kT, kE, 2, score, 2);  // even rows, odd rows
    EXPECT_EQ(seq, (std::vector<float>{3, 3, 1, 1, 2, 1, 2, 3}));
    const double ref_whole = aux_loss64(x, kT, kE, whole, 2, score, kT, 0.1f);
    const double ref_seq = aux_loss64(x, kT, kE, seq, 2, score, kT / 2, 0.1f);
    EXPECT_NEAR(aux(kLogits, kT, kE, whole, 2, score, kT, 0.1f), ref_whole, 1e-6 * ref_whole);
    EXPECT_NEAR(aux(kLogits, kT, kE, seq, 2, score, kT / 2, 0.1f), ref_seq, 1e-6 * ref_seq);
  }
  // The per-sequence form is the mean of each sequence's own switch loss.
  const std::vector<float> seq = counts_of(kLogits, kT, kE, 2, Score::Softmax, 2);
  double mean = 0;
  for (int64_t b = 0; b < 2; ++b) {
    std::vector<float> rows;
    for (int64_t t = b; t < kT; t += 2) rows.insert(rows.end(), &kLogits[t * kE], &kLogits[t * kE] + kE);
    const std::vector<float> own(seq.begin() + b * kE, seq.begin() + (b + 1) * kE);
    mean += aux(rows, kT / 2, kE, own, 2, Score::Softmax, kT / 2, 0.1f) / 2;
  }
  EXPECT_NEAR(aux(kLogits, kT, kE, seq, 2, Score::Softmax, kT / 2, 0.1f), mean, 1e-12);
}

TEST(AuxLoss, BackwardMatchesFiniteDifferences) {
  const int64_t T = 8, E = 5, k = 2;
  const std::vector<float> x = random_vector(T * E, 21, -2.0f, 2.0f);
  const float coeff = 0.5f, dloss = 1.7f;
  for (Score score : {Score::Softmax, Score::Sigmoid})
    for (int64_t groups : {1, 2}) {
      const std::string what = std::string(score == Score::Sigmoid ? "sigmoid" : "softmax") + " groups " +
                               std::to_string(groups);
      const std::vector<float> counts = counts_of(x, T, E, k, score, groups);
      const int64_t tpg = 2 * T / groups;  // as if another rank held as many tokens of each group
      auto L = [&](const Vec& xd) { return dloss * aux_loss64(xd, T, E, counts, k, score, tpg, coeff); };
      const double ref = L(to_double(x)) / dloss;
      EXPECT_NEAR(aux(x, T, E, counts, k, score, tpg, coeff), ref, 1e-6 * ref) << what;
      std::vector<float> got = added(
          [&](const Tensor& d) {
            aux_loss_backward(f32(x, {T, E}), f32(counts, {groups, E}), k, score, tpg, coeff, dloss, d);
          },
          T, E);
      expect_close(got, numeric_gradient(L, to_double(x)), 1e-4, what);
    }
}

// ---- the z-loss ----

TEST(ZLoss, ForwardAndBackwardMatchFloat64) {
  const int64_t T = 7, E = 6, total = 3 * T;
  const std::vector<float> x = random_vector(T * E, 31, -3.0f, 3.0f);
  const float coeff = 1e-2f, dloss = 0.8f;
  const Vec xd = to_double(x);
  EXPECT_NEAR(z_loss_forward(f32(x, {T, E}), coeff, total), z_loss64(xd, T, E, coeff, total),
              1e-6 * z_loss64(xd, T, E, coeff, total));
  auto L = [&](const Vec& v) { return dloss * z_loss64(v, T, E, coeff, total); };
  std::vector<float> got = added([&](const Tensor& d) { z_loss_backward(f32(x, {T, E}), coeff, total, dloss, d); },
                                 T, E);
  expect_close(got, numeric_gradient(L, xd), 1e-5, "z-loss");
  // Large logits do not overflow: logsumexp is max-shifted.
  std::vector<float> big = x;
  for (float& v : big) v += 200.0f;
  EXPECT_NEAR(z_loss_forward(f32(big, {T, E}), coeff, total), z_loss64(to_double(big), T, E, coeff, total),
              1e-6 * z_loss64(to_double(big), T, E, coeff, total));
}

// ---- the ranks' shares add up ----

// Two "ranks" holding rows [0, T/2) and [T/2, T) (a sequence-parallel split: T/2 is a multiple of the
// groups, so a local row's group is its global row's), each with the counts summed over both.
TEST(AuxLoss, RankSharesAddUpToTheWholeMatrix) {
  const int64_t T = 24, E = 6, k = 2, half = T / 2;
  const std::vector<float> x = random_vector(T * E, 41, -2.0f, 2.0f);
  const std::vector<float> a(x.begin(), x.begin() + half * E), b(x.begin() + half * E, x.end());
  for (Score score : {Score::Softmax, Score::Sigmoid})
    for (int64_t groups : {1, 3}) {
      std::vector<float> summed = counts_of(a, half, E, k, score, groups), cb = counts_of(b, half, E, k, score, groups);
      for (size_t i = 0; i < summed.size(); ++i) summed[i] += cb[i];
      EXPECT_EQ(summed, counts_of(x, T, E, k, score, groups));
      const int64_t tpg = T / groups;
      const double whole = aux(x, T, E, summed, k, score, tpg, 0.3f);
      EXPECT_NEAR(aux(a, half, E, summed, k, score, tpg, 0.3f) + aux(b, half, E, summed, k, score, tpg, 0.3f), whole,
                  1e-12 * whole);
      // and each rank's gradient is its rows of the whole one
      Tensor dw = Tensor::zeros({T, E}), da = Tensor::zeros({half, E});
      aux_loss_backward(f32(x, {T, E}), f32(summed, {groups, E}), k, score, tpg, 0.3f, 1.0f, dw);
      aux_loss_backward(f32(a, {half, E}), f32(summed, {groups, E}), k, score, tpg, 0.3f, 1.0f, da);
      EXPECT_EQ(0, std::memcmp(dw.raw(), da.raw(), da.nbytes()));
    }
  const double whole = z_loss_forward(f32(x, {T, E}), 0.01f, T);
  EXPECT_NEAR(z_loss_forward(f32(a, {half, E}), 0.01f, T) + z_loss_forward(f32(b, {half, E}), 0.01f, T), whole,
              1e-12 * whole);
}

}  // namespace
}  // namespace tessera::kernels
