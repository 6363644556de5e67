// The MoE routing kernels' token rows (kernels/moe_routing.h): capacity and padding on a fixed routing,
// the row gathers against loops, the jitter against dropout's uniform, and thread-count independence.
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
#include "kernels/cuda/cuda_runtime.h"
#include "kernels/device_dispatch.h"
#include "kernels/dropout.h"
#include "kernels/moe_routing_testing.h"

namespace tessera::kernels {
namespace {

using testing::max_scaled_error;
using testing::random_vector;
using testing::to_double;
using Vec = std::vector<double>;
using Score = RouterScoreFunction;
using namespace moe_testing;

// ---- capacity, dropping and padding ----

TEST(ExpertCapacity, IsMegatronsCeiling) {
  EXPECT_EQ(expert_capacity(8, 2, 4, 1.0), 4);
  EXPECT_EQ(expert_capacity(8, 2, 4, 1.1), 5);   // ceil(4.4)
  EXPECT_EQ(expert_capacity(8, 2, 4, 0.5), 2);
  EXPECT_EQ(expert_capacity(7, 1, 2, 1.0), 4);   // ceil(3.5)
  EXPECT_EQ(expert_capacity(10, 2, 4, 1.0), 5);
  EXPECT_EQ(expert_capacity(4096, 2, 64, 1.25), 160);
  EXPECT_THROW(expert_capacity(8, 2, 0, 1.0), Error);
}

// Expert 0 gets 7 of the 16 entries; capacity ceil(8 * 2 / 4 * 1.0) = 4. Token 5 ties token 0 at 0.6
// for expert 0's last place under Probs.
const std::vector<int32_t> kRouteIdx = {0, 1, 0, 2, 1, 0, 0, 3, 2, 0, 0, 1, 3, 2, 0, 3};
const std::vector<float> kRouteProb = {0.6f, 0.4f, 0.7f, 0.3f, 0.8f, 0.2f, 0.9f, 0.1f,
                                       0.5f, 0.5f, 0.6f, 0.4f, 0.6f, 0.4f, 0.65f, 0.35f};

struct Rows {
  std::vector<int64_t> counts;
  std::vector<int32_t> token, slot;
  std::vector<float> prob;
};

Rows rows_of(int64_t capacity, TokenDropPolicy policy, bool pad) {
  ExpertRows r = expert_rows(i32(kRouteIdx, {8, 2}), f32(kRouteProb, {8, 2}), 4, capacity, policy, pad);
  return {r.counts, ints(r.token), ints(r.slot), floats(r.prob)};
}

void expect_rows(const Rows& got, const std::vector<int64_t>& counts, const std::vector<int32_t>& token,
                 const std::vector<int32_t>& slot, const std::string& what) {
  EXPECT_EQ(got.counts, counts) << what;
  EXPECT_EQ(got.token, token) << what;
  EXPECT_EQ(got.slot, slot) << what;
  ASSERT_EQ(got.prob.size(), slot.size()) << what;
  for (size_t i = 0; i < slot.size(); ++i) {
    EXPECT_EQ(got.prob[i], slot[i] < 0 ? 0.0f : kRouteProb[slot[i]]) << what << " row " << i;
    if (slot[i] >= 0) {
      EXPECT_EQ(slot[i] / 2, token[i]) << what << " row " << i;
    }
  }
}

TEST(ExpertRows, DroplessKeepsEveryEntryExpertMajor) {
  expect_rows(rows_of(-1, TokenDropPolicy::Probs, false), {7, 3, 3, 3},
              {0, 1, 2, 3, 4, 5, 7, /**/ 0, 2, 5, /**/ 1, 4, 6, /**/ 3, 6, 7},
              {0, 2, 5, 6, 9, 10, 14, /**/ 1, 4, 11, /**/ 3, 8, 13, /**/ 7, 12, 15}, "dropless");
}

TEST(ExpertRows, CapacityKeepsTheHighestProbsOrTheFirstTokens) {
  const int64_t cap = expert_capacity(8, 2, 4, 1.0);
  ASSERT_EQ(cap, 4);
  // Probs: 0.9 (token 3), 0.7 (1), 0.65 (7), then 0.6 of token 0 over token 5's equal 0.6.
  expect_rows(rows_of(cap, TokenDropPolicy::Probs, false), {4, 3, 3, 3},
              {0, 1, 3, 7, /**/ 0, 2, 5, /**/ 1, 4, 6, /**/ 3, 6, 7},
              {0, 2, 6, 14, /**/ 1, 4, 11, /**/ 3, 8, 13, /**/ 7, 12, 15}, "probs");
  expect_rows(rows_of(cap, TokenDropPolicy::Position, false), {4, 3, 3, 3},
              {0, 1, 2, 3, /**/ 0, 2, 5, /**/ 1, 4, 6, /**/ 3, 6, 7},
              {0, 2, 5, 6, /**/ 1, 4, 11, /**/ 3, 8, 13, /**/ 7, 12, 15}, "position");
  // A capacity beyond the tokens drops nothing.
  expect_rows(rows_of(20, TokenDropPolicy::Probs, false), rows_of(-1, TokenDropPolicy::Probs, false).counts,
              rows_of(-1, TokenDropPolicy::Probs, false).token, rows_of(-1, TokenDropPolicy::Probs, false).slot,
              "capacity > T");
}

TEST(ExpertRows, PaddingGivesEveryExpertCapacityRows) {
  // The under-full experts take their lowest non-routed tokens, prob 0 and slot -1, in token order.
  expect_rows(rows_of(4, TokenDropPolicy::Probs, true), {4, 4, 4, 4},
              {0, 1, 3, 7, /**/ 0, 1, 2, 5, /**/ 0, 1, 4, 6, /**/ 0, 3, 6, 7},
              {0, 2, 6, 14, /**/ 1, -1, 4, 11, /**/ -1, 3, 8, 13, /**/ -1, 7, 12, 15}, "pad probs");
  expect_rows(rows_of(4, TokenDropPolicy::Position, true), {4, 4, 4, 4},
              {0, 1, 2, 3, /**/ 0, 1, 2, 5, /**/ 0, 1, 4, 6, /**/ 0, 3, 6, 7},
              {0, 2, 5, 6, /**/ 1, -1, 4, 11, /**/ -1, 3, 8, 13, /**/ -1, 7, 12, 15}, "pad position");
  Rows two = rows_of(2, TokenDropPolicy::Probs, true);  // everyone over capacity: no padding rows
  EXPECT_EQ(two.counts, (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(std::count(two.slot.begin(), two.slot.end(), -1), 0);
  Rows all = rows_of(20, TokenDropPolicy::Probs, true);  // capacity > T: every expert gets all 8 tokens
  EXPECT_EQ(all.counts, (std::vector<int64_t>{8, 8, 8, 8}));
  EXPECT_EQ(std::vector<int32_t>(all.token.begin() + 8, all.token.begin() + 16),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_THROW(expert_rows(i32(kRouteIdx, {8, 2}), f32(kRouteProb, {8, 2}), 3, 4, TokenDropPolicy::Probs, false),
               Error);  // index 3 of 3 experts
}

// ---- row gathers and scatters ----

const std::vector<int32_t> kTokens = {2, 0, 5, 2, 3, 0, 0, 1, 5};  // R = 9 rows of T = 6 tokens, repeats

TEST(TokenRows, GatherScatterAndDotsMatchLoops) {
  const int64_t T = 6, h = 5, R = static_cast<int64_t>(kTokens.size());
  const std::vector<float> x = random_vector(T * h, 51), rows = random_vector(R * h, 52), w = random_vector(R, 53);
  const std::vector<float> y0 = random_vector(T * h, 54), dy = random_vector(T * h, 55);
  Tensor tok = i32(kTokens, {R}), out = Tensor::empty({R, h});
  gather_token_rows(f32(x, {T, h}), tok, out);
  std::vector<float> want(R * h);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < h; ++c) want[r * h + c] = x[kTokens[r] * h + c];
  EXPECT_EQ(floats(out), want);

  for (bool weighted : {true, false}) {
    Tensor y = f32(y0, {T, h});
    scatter_add_token_rows(f32(rows, {R, h}), tok, weighted ? f32(w, {R}) : Tensor(), y);
    Vec ref = to_double(y0);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < h; ++c) ref[kTokens[r] * h + c] += (weighted ? w[r] : 1.0) * rows[r * h + c];
    EXPECT_LE(max_scaled_error(floats(y), ref, 1e-6, 1e-6), 1.0) << weighted;
  }

  Tensor dw = Tensor::empty({R});
  token_row_dots(f32(dy, {T, h}), tok, f32(rows, {R, h}), dw);
  Vec ref(R), fd(R);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < h; ++c) ref[r] += static_cast<double>(dy[kTokens[r] * h + c]) * rows[r * h + c];
  EXPECT_LE(max_scaled_error(floats(dw), ref, 1e-6, 1e-6), 1.0);
  // The dots are the gradient of L = <dy, scatter_add(rows, weight)> with respect to the weights.
  auto L = [&](const std::vector<float>& weight) {
    Tensor y = Tensor::zeros({T, h});
    scatter_add_token_rows(f32(rows, {R, h}), tok, f32(weight, {R}), y);
    double s = 0;
    for (int64_t i = 0; i < T * h; ++i) s += static_cast<double>(dy[i]) * y.f32()[i];
    return s;
  };
  for (int64_t r = 0; r < R; ++r) {
    std::vector<float> up = w, down = w;
    up[r] += 0.25f;
    down[r] -= 0.25f;
    fd[r] = (L(up) - L(down)) / 0.5;
  }
  EXPECT_LE(max_scaled_error(floats(dw), fd, 2e-5, 1e-5), 1.0);
  EXPECT_THROW(gather_token_rows(f32(x, {T, h}), i32({0, 6}, {2}), Tensor::empty({2, h})), Error);
}

// ---- the router input jitter ----

TEST(Jitter, MultipliersLieInTheRangeAndAreDeterministic) {
  const DropoutRegion r{6, 3, 40, 0, 6, 0};
  const int64_t n = 6 * 3 * 40;
  const std::vector<float> x = random_vector(n, 61, -3.0f, 3.0f);
  const float eps = 0.1f;
  Tensor y = Tensor::empty({n}), again = Tensor::empty({n}), other = Tensor::empty({n});
  jitter_multiply(f32(x, {n}), y, eps, 7, 8, r);
  jitter_multiply(f32(x, {n}), again, eps, 7, 8, r);
  jitter_multiply(f32(x, {n}), other, eps, 9, 8, r);
  EXPECT_TRUE(same_bits(y, again));
  EXPECT_FALSE(same_bits(y, other));
  double mean = 0, lowest = 2, highest = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double a = x[i] * (1.0 - eps), b = x[i] * (1.0 + eps), lo = std::min(a, b), hi = std::max(a, b);
    EXPECT_GE(y.f32()[i], lo - 1e-6 * std::abs(x[i])) << i;
    EXPECT_LE(y.f32()[i], hi + 1e-6 * std::abs(x[i])) << i;
    const double f = y.f32()[i] / x[i];
    mean += f / n;
    lowest = std::min(lowest, f);
    highest = std::max(highest, f);
  }
  EXPECT_NEAR(mean, 1.0, 0.01);
  EXPECT_LT(lowest, 1 - 0.95 * eps);  // the whole range is drawn
  EXPECT_GT(highest, 1 + 0.95 * eps);
  Tensor z = f32(x, {n});  // in place
  jitter_multiply(z, z, eps, 7, 8, r);
  EXPECT_TRUE(same_bits(z, y));
  jitter_multiply(f32(x, {n}), z, 0.0f, 7, 8, r);  // eps 0: the identity
  EXPECT_EQ(floats(z), x);
}

// A slice (sequence rows 3..5, samples 1..2 of a [8, 3, 10] tensor) draws the whole tensor's multipliers.
TEST(Jitter, ASliceDrawsTheWholeTensorsMultipliers) {
  const int64_t S = 8, B = 3, h = 10;
  const std::vector<float> x = random_vector(S * B * h, 62, 0.5f, 2.0f);
  Tensor whole = Tensor::empty({S * B * h});
  jitter_multiply(f32(x, {S * B * h}), whole, 0.2f, 3, 4, {S, B, h, 0, S, 0});
  const DropoutRegion part{3, 2, h, 3, S, 1};
  std::vector<float> xs;
  for (int64_t s = 0; s < 3; ++s)
    for (int64_t b = 0; b < 2; ++b)
      xs.insert(xs.end(), &x[((s + 3) * B + b + 1) * h], &x[((s + 3) * B + b + 1) * h] + h);
  Tensor slice = Tensor::empty({3 * 2 * h});
  jitter_multiply(f32(xs, {3 * 2 * h}), slice, 0.2f, 3, 4, part);
  for (int64_t s = 0; s < 3; ++s)
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t c = 0; c < h; ++c)
        EXPECT_EQ(slice.f32()[(s * 2 + b) * h + c], whole.f32()[((s + 3) * B + b + 1) * h + c]) << s << " " << b;
}

// With eps = 1/2 the multiplier is 1/2 + u, which gives back dropout's uniform for the element: the
// Philox word of its global index, kept by dropout iff u >= p.
TEST(Jitter, DrawsDropoutsUniform) {
  const DropoutRegion r{4, 2, 12, 5, 16, 3};
  const int64_t n = 4 * 2 * 12;
  const uint64_t seed = 1234, stream = 77;
  const std::vector<float> ones(n, 1.0f);
  Tensor y = Tensor::empty({n}), kept = Tensor::empty({n});
  jitter_multiply(f32(ones, {n}), y, 0.5f, seed, stream, r);
  dropout_forward(f32(ones, {n}), kept, 0.3f, seed, stream, r);
  const PhiloxStream rng(seed, stream);
  int agree = 0;
  for (int64_t s = 0; s < r.seq; ++s)
    for (int64_t b = 0; b < r.batch; ++b)
      for (int64_t c = 0; c < r.hidden; ++c) {
        const int64_t i = (s * r.batch + b) * r.hidden + c;
        const int64_t g = ((r.sample_offset + b) * r.seq_total + r.seq_offset + s) * r.hidden + c;
        const double u = y.f32()[i] - 0.5;
        EXPECT_NEAR(u, rng.uniform(static_cast<uint64_t>(g)), 0x1p-24) << i;
        if (std::abs(u - 0.3) > 1e-6) {
          EXPECT_EQ(u >= 0.3, kept.f32()[i] != 0.0f) << i;
          ++agree;
        }
      }
  EXPECT_GT(agree, n / 2);
}

// ---- thread-count independence ----

// Every output of every kernel, as bytes.
std::vector<std::vector<char>> everything() {
  const int64_t T = 301, E = 9, h = 17;
  const std::vector<float> x = random_vector(T * E, 71, -3.0f, 3.0f), act = random_vector(T * h, 72);
  Tensor logits = f32(x, {T, E});
  std::vector<Tensor> outs;
  for (const TopkRouterOptions& opt : std::vector<TopkRouterOptions>{
           {2, Score::Softmax, false, 1.0f}, {3, Score::Softmax, true, 2.0f}, {2, Score::Sigmoid, false, 1.0f}}) {
    Tensor idx = Tensor::empty({T, opt.topk}, DType::I32), probs = Tensor::empty({T, opt.topk});
    topk_router_forward(logits, opt, Tensor(), idx, probs);
    Tensor d = Tensor::zeros({T, E});
    topk_router_backward(logits, idx, f32(random_vector(T * opt.topk, 73), {T, opt.topk}), opt, d);
    outs.insert(outs.end(), {idx, probs, d});
  }
  for (Score score : {Score::Softmax, Score::Sigmoid}) {
    Tensor counts = Tensor::empty({7, E}), d = Tensor::zeros({T, E});
    aux_loss_counts(logits, 2, score, 7, counts);
    Tensor loss = f32({static_cast<float>(aux_loss_forward(logits, counts, 2, score, 43, 0.1f))}, {1});
    aux_loss_backward(logits, counts, 2, score, 43, 0.1f, 1.0f, d);
    outs.insert(outs.end(), {counts, loss, d});
  }
  Tensor z = f32({static_cast<float>(z_loss_forward(logits, 0.01f, T))}, {1}), dz = Tensor::zeros({T, E});
  z_loss_backward(logits, 0.01f, T, 1.0f, dz);
  Tensor idx = Tensor::empty({T, 2}, DType::I32), probs = Tensor::empty({T, 2});
  topk_router_forward(logits, {2, Score::Softmax, false, 1.0f}, Tensor(), idx, probs);
  ExpertRows er = expert_rows(idx, probs, E, expert_capacity(T, 2, E, 1.0), TokenDropPolicy::Probs, true);
  const int64_t R = er.token.numel();
  Tensor gathered = Tensor::empty({R, h}), y = Tensor::zeros({T, h}), dots = Tensor::empty({R});
  gather_token_rows(f32(act, {T, h}), er.token, gathered);
  scatter_add_token_rows(gathered, er.token, er.prob, y);
  token_row_dots(f32(act, {T, h}), er.token, gathered, dots);
  Tensor jit = Tensor::empty({T * h});
  jitter_multiply(f32(act, {T * h}), jit, 0.05f, 5, 6, {T, 1, h, 0, T, 0});
  outs.insert(outs.end(), {z, dz, er.token, er.slot, er.prob, gathered, y, dots, jit});
  std::vector<std::vector<char>> bytes;
  for (const Tensor& t : outs) {
    const char* p = static_cast<const char*>(t.raw());
    bytes.emplace_back(p, p + t.nbytes());
  }
  return bytes;
}

TEST(MoeRouting, ResultsAreBitwiseIndependentOfThreadCount) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto one = everything();
  omp_set_num_threads(2);
  const auto two = everything();
  omp_set_num_threads(saved);
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_EQ(one[i], two[i]) << "output " << i;
}

// ---- device dispatch ----

using testing::FakeDeviceAllocator;

// Every routing entry point refuses a tensor on a device without kernels, naming itself and the device.
// In a CUDA build on a machine without a GPU each has a CUDA implementation (kernels/cuda/moe_routing.h)
// and gets past the device check to its first CUDA call, which fails with CUDA's error: the dispatch took
// it to the CUDA code. (With a GPU the fake device memory below is host memory, which a kernel must not be
// given: the test then has nothing to check.)
TEST(MoeRouting, TensorsOnAnotherDeviceAreRefused) {
  if constexpr (kWithCuda)
    if (tessera::cuda::device_count() > 0) GTEST_SKIP() << "a GPU is present: kernels/cuda/ tests cover these";
  FakeDeviceAllocator fake;
  const Device cuda{DeviceType::CUDA, 0};
  Allocator* previous = register_allocator(cuda, &fake);
  {
    auto dev = [&](const Shape& s, DType t = DType::F32) { return Tensor::zeros(s, t, cuda); };
    Tensor x = dev({4, 4}), idx = dev({4, 2}, DType::I32), p = dev({4, 2}), c = dev({1, 4}), tok = dev({4}, DType::I32);
    const TopkRouterOptions opt{2, Score::Softmax, false, 1.0f};
    const std::vector<std::pair<std::string, std::function<void()>>> calls = {
        {"topk_router_forward", [&] { topk_router_forward(x, opt, Tensor(), idx, p); }},
        {"topk_router_backward", [&] { topk_router_backward(x, idx, p, opt, x); }},
        {"aux_loss_counts", [&] { aux_loss_counts(x, 2, Score::Softmax, 1, c); }},
        {"aux_loss_forward", [&] { aux_loss_forward(x, c, 2, Score::Softmax, 4, 0.1f); }},
        {"aux_loss_backward", [&] { aux_loss_backward(x, c, 2, Score::Softmax, 4, 0.1f, 1.0f, x); }},
        {"z_loss_forward", [&] { z_loss_forward(x, 0.1f, 4); }},
        {"z_loss_backward", [&] { z_loss_backward(x, 0.1f, 4, 1.0f, x); }},
        {"expert_rows", [&] { expert_rows(idx, p, 4, -1, TokenDropPolicy::Probs, false); }},
        {"gather_token_rows", [&] { gather_token_rows(x, tok, x); }},
        {"scatter_add_token_rows", [&] { scatter_add_token_rows(x, tok, Tensor(), x); }},
        {"token_row_dots", [&] { token_row_dots(x, tok, x, dev({4})); }},
        {"jitter_multiply", [&] { jitter_multiply(x, x, 0.1f, 1, 2, {4, 1, 4, 0, 4, 0}); }},
    };
    for (const auto& [kernel, call] : calls) {
      try {
        call();
        ADD_FAILURE() << kernel << " read a tensor on cuda:0";
      } catch (const Error& e) {
        const std::string expected = kWithCuda ? " failed: cuda" : kernel + " on cuda:0 is not available in this build";
        EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
      }
    }
  }
  register_allocator(cuda, previous);
}

}  // namespace
}  // namespace tessera::kernels
