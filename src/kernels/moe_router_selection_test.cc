// DeepSeek-V3's routing rules in topk_router_forward (kernels/moe_routing.h): the expert bias of
// aux-loss-free balancing, which changes the selection and not the weights, and group-limited routing
// (a group's score is the sum of its top k / group_topk scores; experts only from the best groups).
// By hand on small rows, then against a float64 reference written straight from Megatron's
// topk_routing_with_score_function and group_limited_topk on random rows of every score mode, and the
// weights' gradient (the chosen experts held fixed) against central differences of that reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "core/check.h"
#include "core/testing.h"
#include "kernels/moe_routing.h"
#include "kernels/moe_routing_testing.h"

namespace tessera::kernels {
namespace {

using namespace moe_testing;
using testing::numeric_gradient;
using testing::random_vector;
using Score = RouterScoreFunction;
using Vec = std::vector<double>;

double sigmoid64(double x) { return 1 / (1 + std::exp(-x)); }

// Indices of v by descending value, ties to the lower index (torch.topk's order on these rows).
std::vector<int32_t> order(const Vec& v) {
  std::vector<int32_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return v[a] > v[b]; });
  return idx;
}

struct Choice {
  std::vector<int32_t> idx;
  Vec probs;
  double margin = 0;  // the smallest gap the selection rests on (a smaller one could flip in fp32)
};

// The probs of one row for the chosen experts idx (Megatron's formulas, float64).
Vec probs64(const double* x, int64_t E, const std::vector<int32_t>& idx, const TopkRouterOptions& opt) {
  const size_t k = idx.size();
  Vec p(k);
  if (opt.score == Score::Softmax && !opt.pre_softmax) {
    double m = -INFINITY, s = 0;
    for (int32_t e : idx) m = std::max(m, x[e]);
    for (size_t j = 0; j < k; ++j) s += p[j] = std::exp(x[idx[j]] - m);
    for (double& v : p) v /= s;
  } else if (opt.score == Score::Softmax) {
    double m = *std::max_element(x, x + E), z = 0;
    for (int64_t i = 0; i < E; ++i) z += std::exp(x[i] - m);
    for (size_t j = 0; j < k; ++j) p[j] = std::exp(x[idx[j]] - m) / z;
  } else {
    double s = 0;
    for (size_t j = 0; j < k; ++j) s += p[j] = sigmoid64(x[idx[j]]);
    if (k > 1)
      for (double& v : p) v /= s + 1e-20;
  }
  for (double& v : p) v *= opt.scaling_factor;
  return p;
}

// One row routed as Megatron does: selection scores (logits, softmax or sigmoid, plus the bias), the
// group mask, the top-k of the masked scores, then the probs from the unbiased scores.
Choice route64(const double* x, int64_t E, const TopkRouterOptions& opt, const std::vector<float>& bias) {
  const int64_t k = opt.topk;
  Vec sel(x, x + E);
  if (opt.score == Score::Softmax && opt.pre_softmax) {
    double m = *std::max_element(x, x + E), z = 0;
    for (double& v : sel) z += v = std::exp(v - m);
    for (double& v : sel) v /= z;
  } else if (opt.score == Score::Sigmoid) {
    for (int64_t i = 0; i < E; ++i) sel[i] = sigmoid64(x[i]) + (bias.empty() ? 0.0 : bias[i]);
  }
  Choice c;
  c.margin = INFINITY;
  if (opt.grouped()) {
    const int64_t G = opt.num_groups, per = E / G, part = k / opt.group_topk;
    Vec group(G);
    for (int64_t g = 0; g < G; ++g) {
      Vec mine(sel.begin() + g * per, sel.begin() + (g + 1) * per);
      std::vector<int32_t> o = order(mine);
      for (int64_t j = 0; j < part; ++j) group[g] += mine[o[j]];
      if (part < per) c.margin = std::min(c.margin, mine[o[part - 1]] - mine[o[part]]);
    }
    std::vector<int32_t> go = order(group);
    if (opt.group_topk < G) c.margin = std::min(c.margin, group[go[opt.group_topk - 1]] - group[go[opt.group_topk]]);
    std::vector<bool> kept(G, false);
    for (int64_t j = 0; j < opt.group_topk; ++j) kept[go[j]] = true;
    for (int64_t i = 0; i < E; ++i)
      if (!kept[i / per]) sel[i] = -INFINITY;
  }
  std::vector<int32_t> o = order(sel);
  c.idx.assign(o.begin(), o.begin() + k);
  if (k < E && std::isfinite(sel[o[k]])) c.margin = std::min(c.margin, sel[o[k - 1]] - sel[o[k]]);
  c.probs = probs64(x, E, c.idx, opt);
  return c;
}

struct Routed {
  std::vector<int32_t> idx;
  std::vector<float> probs;
};

Routed route(const std::vector<float>& logits, int64_t E, const TopkRouterOptions& opt,
             const std::vector<float>& bias = {}) {
  const int64_t T = static_cast<int64_t>(logits.size()) / E;
  Tensor idx = Tensor::empty({T, opt.topk}, DType::I32), probs = Tensor::empty({T, opt.topk});
  topk_router_forward(f32(logits, {T, E}), opt, bias.empty() ? Tensor() : f32(bias, {E}), idx, probs);
  return {ints(idx), floats(probs)};
}

TopkRouterOptions options(int64_t k, Score score, bool pre, int64_t groups = 0, int64_t group_topk = 0) {
  TopkRouterOptions o{k, score, pre, 1.0f};
  o.num_groups = groups;
  o.group_topk = group_topk;
  return o;
}

// The bias moves expert 3 into the top 2 and expert 1 out; the weights are the unbiased sigmoids of
// experts 3 and 0, normalised over the two.
TEST(RouterSelection, ExpertBiasChangesTheChoiceNotTheWeights) {
  const std::vector<float> x = {2.0f, 1.0f, 0.0f, -1.0f};
  const Routed plain = route(x, 4, options(2, Score::Sigmoid, false));
  EXPECT_EQ(plain.idx, (std::vector<int32_t>{0, 1}));
  const Routed biased = route(x, 4, options(2, Score::Sigmoid, false), {0.0f, 0.0f, 0.0f, 1.0f});
  ASSERT_EQ(biased.idx, (std::vector<int32_t>{3, 0}));  // sigmoid(-1) + 1 = 1.27 > sigmoid(2) = 0.88
  const double a = sigmoid64(-1), b = sigmoid64(2);
  EXPECT_NEAR(biased.probs[0], a / (a + b), 1e-6);
  EXPECT_NEAR(biased.probs[1], b / (a + b), 1e-6);
  // A bias equal on every expert changes nothing, not even a bit of the weights.
  const Routed shifted = route(x, 4, options(2, Score::Sigmoid, false), {0.25f, 0.25f, 0.25f, 0.25f});
  EXPECT_EQ(shifted.idx, plain.idx);
  EXPECT_EQ(shifted.probs, plain.probs);
}

// Groups of 2: group scores (sum of the top 2) 0, 6, 4, -2; the two best groups are 1 and 2, so the
// best expert overall (0, logit 5, in a group whose sum is 0) is not chosen.
TEST(RouterSelection, GroupLimitedTopKByHand) {
  const std::vector<float> x = {5.0f, -5.0f, 3.0f, 3.0f, 4.0f, 0.0f, -1.0f, -1.0f};
  EXPECT_EQ(route(x, 8, options(4, Score::Softmax, false)).idx, (std::vector<int32_t>{0, 4, 2, 3}));
  const Routed grouped = route(x, 8, options(4, Score::Softmax, false, 4, 2));
  EXPECT_EQ(grouped.idx, (std::vector<int32_t>{4, 2, 3, 5}));
  const double z = std::exp(4.0) + 2 * std::exp(3.0) + 1;
  EXPECT_NEAR(grouped.probs[0], std::exp(4.0) / z, 1e-6);
  EXPECT_NEAR(grouped.probs[3], 1 / z, 1e-6);
  // top-2 of 1 kept group of 2 (a group's score its top 2): group 1 (3 + 3) beats group 0 (5 - 5).
  EXPECT_EQ(route(x, 8, options(2, Score::Softmax, false, 4, 1)).idx, (std::vector<int32_t>{2, 3}));
  // top-1 per group of 2 kept groups with k = 2: group scores are maxima 5, 3, 4, -1: groups 0 and 2.
  EXPECT_EQ(route(x, 8, options(2, Score::Softmax, false, 4, 2)).idx, (std::vector<int32_t>{0, 4}));
  // Every group kept is plain top-k.
  EXPECT_EQ(route(x, 8, options(4, Score::Softmax, false, 4, 4)).idx, (std::vector<int32_t>{0, 4, 2, 3}));
}

// Random rows in every score mode, with and without groups and bias, against the float64 reference.
TEST(RouterSelection, MatchesAFloat64ReferenceInEveryMode) {
  const int64_t T = 200, E = 16;
  const std::vector<float> x = random_vector(T * E, 11, -3.0f, 3.0f);
  const std::vector<float> bias = random_vector(E, 12, -0.2f, 0.2f);
  struct Case {
    TopkRouterOptions opt;
    bool bias;
  };
  std::vector<Case> cases;
  for (auto [groups, gk, k] : {std::array<int64_t, 3>{0, 0, 4}, {4, 2, 4}, {8, 4, 8}, {4, 1, 2}, {2, 2, 6}})
    for (int mode = 0; mode < 4; ++mode) {
      const Score score = mode < 2 ? Score::Softmax : Score::Sigmoid;
      TopkRouterOptions o = options(k, score, mode == 1, groups, gk);
      o.scaling_factor = mode == 2 ? 2.5f : 1.0f;
      cases.push_back({o, mode == 3});
    }
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "k " << c.opt.topk << " groups " << c.opt.num_groups << "/" << c.opt.group_topk
                                    << (c.opt.score == Score::Sigmoid ? " sigmoid" : " softmax")
                                    << (c.opt.pre_softmax ? " pre" : "") << (c.bias ? " bias" : ""));
    const std::vector<float> b = c.bias ? bias : std::vector<float>();
    const Routed got = route(x, E, c.opt, b);
    const int64_t k = c.opt.topk;
    int compared = 0;
    for (int64_t t = 0; t < T; ++t) {
      const Vec row(x.begin() + t * E, x.begin() + (t + 1) * E);
      const Choice want = route64(row.data(), E, c.opt, b);
      if (want.margin < 1e-4) continue;  // a near tie fp32 may break the other way
      ++compared;
      for (int64_t j = 0; j < k; ++j) {
        ASSERT_EQ(got.idx[t * k + j], want.idx[j]) << "token " << t << " choice " << j;
        EXPECT_NEAR(got.probs[t * k + j], want.probs[j], 1e-6 * std::max(1.0, std::abs(want.probs[j])))
            << "token " << t << " choice " << j;
      }
    }
    EXPECT_GT(compared, T * 9 / 10);
  }
}

// The weights' gradient with bias and groups is that of the unbiased scores at the chosen experts.
TEST(RouterSelection, WeightGradientWithBiasAndGroupsMatchesCentralDifferences) {
  const int64_t T = 6, E = 8;
  const std::vector<float> x = random_vector(T * E, 21, -2.0f, 2.0f);
  const std::vector<float> bias = random_vector(E, 22, -0.3f, 0.3f);
  const std::vector<float> dprobs = random_vector(T * 4, 23);
  for (const TopkRouterOptions& opt : {options(4, Score::Sigmoid, false, 4, 2), options(4, Score::Softmax, false, 2, 1),
                                       options(4, Score::Softmax, true, 4, 2)}) {
    const bool with_bias = opt.score == Score::Sigmoid;
    const Routed r = route(x, E, opt, with_bias ? bias : std::vector<float>());
    Tensor dx = Tensor::zeros({T, E});
    topk_router_backward(f32(x, {T, E}), i32(r.idx, {T, 4}), f32(dprobs, {T, 4}), opt, dx);
    auto loss = [&](const Vec& v) {
      double l = 0;
      for (int64_t t = 0; t < T; ++t) {
        const std::vector<int32_t> idx(r.idx.begin() + t * 4, r.idx.begin() + (t + 1) * 4);
        const Vec p = probs64(v.data() + t * E, E, idx, opt);
        for (int64_t j = 0; j < 4; ++j) l += dprobs[t * 4 + j] * p[j];
      }
      return l;
    };
    const Vec want = numeric_gradient(loss, Vec(x.begin(), x.end()));
    const std::vector<float> got = floats(dx);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
  }
}

TEST(RouterSelection, RefusesBiasWithoutSigmoidAndGroupsThatDoNotFit) {
  const std::vector<float> x = random_vector(2 * 8, 31);
  const std::vector<float> bias(8, 0.0f);
  EXPECT_THROW(route(x, 8, options(2, Score::Softmax, false), bias), Error);
  EXPECT_THROW(route(x, 8, options(2, Score::Sigmoid, false, 3, 1)), Error);  // 3 groups of 8 experts
  EXPECT_THROW(route(x, 8, options(2, Score::Sigmoid, false, 4, 5)), Error);  // more groups kept than there are
  EXPECT_THROW(route(x, 8, options(3, Score::Sigmoid, false, 4, 2)), Error);  // 3 not divisible by 2
  EXPECT_THROW(route(x, 8, options(6, Score::Sigmoid, false, 4, 2)), Error);  // top-3 of a group of 2
  Tensor idx = Tensor::empty({2, 2}, DType::I32), probs = Tensor::empty({2, 2});
  EXPECT_THROW(topk_router_forward(f32(x, {2, 8}), options(2, Score::Sigmoid, false), f32(std::vector<float>(7, 0.0f), {7}),
                                   idx, probs),
               Error);  // a bias of 7 for 8 experts
}

}  // namespace
}  // namespace tessera::kernels
