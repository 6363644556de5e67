#include "kernels/cpu/cross_entropy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/philox.h"
#include "core/testing.h"

namespace tessera::kernels {
namespace {

// The CPU implementations over host buffers (kernels/cpu/), beside the tensor entry points.
using namespace cpu;

// float64 log-sum-exp of row r.
template <typename T>
double ref_lse(const std::vector<T>& x, int64_t r, int64_t vocab) {
  double m = -INFINITY, s = 0;
  for (int64_t j = 0; j < vocab; ++j) m = std::max(m, static_cast<double>(x[r * vocab + j]));
  for (int64_t j = 0; j < vocab; ++j) s += std::exp(static_cast<double>(x[r * vocab + j]) - m);
  return m + std::log(s);
}

std::vector<int32_t> random_targets(int64_t rows, int64_t vocab, uint64_t seed) {
  PhiloxStream rng(seed, 1);
  std::vector<int32_t> t(rows);
  for (int64_t r = 0; r < rows; ++r) t[r] = static_cast<int32_t>(rng.bits(r) % vocab);
  return t;
}

struct Forward {
  std::vector<float> loss, lse;
};

Forward forward(const std::vector<float>& x, const std::vector<int32_t>& t, int64_t rows, int64_t vocab) {
  Forward f{std::vector<float>(rows), std::vector<float>(rows)};
  cross_entropy_forward(x.data(), t.data(), f.loss.data(), f.lse.data(), rows, vocab);
  return f;
}

void expect_forward_matches_reference(const std::vector<float>& x, int64_t rows, int64_t vocab) {
  std::vector<int32_t> t = random_targets(rows, vocab, 1);
  Forward f = forward(x, t, rows, vocab);
  std::vector<double> loss(rows), lse(rows);
  for (int64_t r = 0; r < rows; ++r) {
    lse[r] = ref_lse(x, r, vocab);
    loss[r] = lse[r] - x[r * vocab + t[r]];
  }
  EXPECT_LE(testing::max_scaled_error(f.lse, lse, 1e-5, 1e-6), 1.0) << "vocab " << vocab;
  EXPECT_LE(testing::max_scaled_error(f.loss, loss, 1e-5, 1e-6), 1.0) << "vocab " << vocab;
}

TEST(CrossEntropy, ForwardMatchesFloat64) {
  expect_forward_matches_reference(testing::random_vector(5 * 13, 2, -3.0f, 3.0f), 5, 13);
  expect_forward_matches_reference(testing::random_vector(4 * 50257, 3, -8.0f, 8.0f), 4, 50257);
}

// Logits near 1000 would overflow a naive exp; the max shift keeps everything finite.
TEST(CrossEntropy, LargeLogitsStayFiniteAndAccurate) {
  std::vector<float> x = testing::random_vector(3 * 1000, 4, -2.0f, 2.0f);
  for (float& v : x) v += 1000.0f;
  expect_forward_matches_reference(x, 3, 1000);
  for (float& v : x) v -= 2000.0f;  // and very negative ones do not underflow to log(0)
  expect_forward_matches_reference(x, 3, 1000);
}

// -inf logits (masked / padded vocabulary entries) contribute nothing; a NaN logit makes the loss NaN
// rather than being silently skipped.
TEST(CrossEntropy, MaskedLogitsAreIgnoredAndNanPropagates) {
  const int64_t vocab = 40;
  std::vector<float> x = testing::random_vector(2 * vocab, 12, -3.0f, 3.0f);
  std::vector<float> masked = x;
  for (int64_t j = 30; j < vocab; ++j) masked[j] = masked[vocab + j] = -INFINITY;
  masked[vocab + 35] = NAN;
  std::vector<int32_t> t = {5, 7};
  Forward f = forward(masked, t, 2, vocab);
  EXPECT_NEAR(f.lse[0], ref_lse(x, 0, 30), 1e-5);
  EXPECT_TRUE(std::isnan(f.loss[1]));
  std::vector<float> g = masked, dloss = {1.0f, 1.0f};
  cross_entropy_backward(g.data(), t.data(), f.lse.data(), dloss.data(), 1, vocab, 0);
  for (int64_t j = 30; j < vocab; ++j) EXPECT_EQ(g[j], 0.0f) << j;
}

TEST(CrossEntropy, BackwardMatchesAnalyticGradient) {
  for (int64_t vocab : {13, 50257}) {
    const int64_t rows = 4;
    std::vector<float> x = testing::random_vector(rows * vocab, 5, -6.0f, 6.0f);
    std::vector<float> dloss = testing::random_vector(rows, 6, 0.5f, 2.0f);
    std::vector<int32_t> t = random_targets(rows, vocab, 7);
    Forward f = forward(x, t, rows, vocab);
    std::vector<double> ref(x.size());
    for (int64_t r = 0; r < rows; ++r) {
      double lse = ref_lse(x, r, vocab);
      for (int64_t j = 0; j < vocab; ++j)
        ref[r * vocab + j] = (std::exp(x[r * vocab + j] - lse) - (j == t[r])) * dloss[r];
    }
    std::vector<float> g = x;
    cross_entropy_backward(g.data(), t.data(), f.lse.data(), dloss.data(), rows, vocab, 0);
    // lse is stored in float (error ~ulp(lse)), so a probability near 1 is known to ~1e-6 absolute.
    double atol = vocab == 13 ? 1e-6 : 1e-9;
    EXPECT_LE(testing::max_scaled_error(g, ref, atol, 1e-5), 1.0) << "vocab " << vocab;
  }
}

// d/dx of sum_r dloss_r * loss_r(x) by float64 central differences.
TEST(CrossEntropy, BackwardMatchesNumericGradient) {
  const int64_t rows = 3, vocab = 11;
  std::vector<float> x = testing::random_vector(rows * vocab, 8, -2.0f, 2.0f);
  std::vector<float> dloss = {1.0f, -0.5f, 2.0f};
  std::vector<int32_t> t = {0, 10, 4};
  auto objective = [&](const std::vector<double>& xd) {
    double total = 0;
    for (int64_t r = 0; r < rows; ++r) total += dloss[r] * (ref_lse(xd, r, vocab) - xd[r * vocab + t[r]]);
    return total;
  };
  std::vector<double> numeric = testing::numeric_gradient(objective, testing::to_double(x));
  Forward f = forward(x, t, rows, vocab);
  std::vector<float> g = x;
  cross_entropy_backward(g.data(), t.data(), f.lse.data(), dloss.data(), rows, vocab, 0);
  EXPECT_LE(testing::max_scaled_error(g, numeric, 1e-6, 1e-5), 1.0);
}

// Vocab-parallel: per-shard (max, sumexp, target logit) combine into the single-shard lse and loss,
// and each shard's backward with the global lse is its slice of the full dlogits.
TEST(CrossEntropy, ShardStatsCombineToSingleShard) {
  const int64_t rows = 6, vocab = 1000;
  const int64_t bounds[] = {0, 300, 750, vocab};  // three uneven shards
  std::vector<float> x = testing::random_vector(rows * vocab, 9, -5.0f, 5.0f);
  x[2 * vocab + 900] = 40.0f;  // a row whose max sits in one shard only
  std::vector<int32_t> t = random_targets(rows, vocab, 10);
  t[0] = 0, t[1] = 299, t[2] = 300, t[3] = vocab - 1;  // targets on the shard edges
  Forward f = forward(x, t, rows, vocab);

  std::vector<double> gmax(rows, -INFINITY), gsum(rows, 0), gtarget(rows, 0);
  for (int k = 0; k < 3; ++k) {
    int64_t begin = bounds[k], local = bounds[k + 1] - begin;
    std::vector<float> shard(rows * local);
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(x.begin() + r * vocab + begin, local, shard.begin() + r * local);
    std::vector<float> m(rows), s(rows), tl(rows);
    cross_entropy_shard_stats(shard.data(), t.data(), m.data(), s.data(), tl.data(), rows, local, begin);
    for (int64_t r = 0; r < rows; ++r) {
      double nm = std::max(gmax[r], static_cast<double>(m[r]));
      gsum[r] = gsum[r] * std::exp(gmax[r] - nm) + s[r] * std::exp(m[r] - nm);
      gmax[r] = nm;
      gtarget[r] += tl[r];
      bool owns = t[r] >= begin && t[r] < begin + local;
      EXPECT_EQ(tl[r], owns ? x[r * vocab + t[r]] : 0.0f) << "row " << r << " shard " << k;
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    double lse = gmax[r] + std::log(gsum[r]);
    EXPECT_NEAR(lse, f.lse[r], 1e-5 * std::max(1.0, std::abs(lse))) << r;
    EXPECT_NEAR(lse - gtarget[r], f.loss[r], 1e-5 * std::max(1.0, std::abs(lse))) << r;
  }

  std::vector<float> dloss = testing::random_vector(rows, 11, 0.5f, 2.0f);
  std::vector<float> full = x;
  cross_entropy_backward(full.data(), t.data(), f.lse.data(), dloss.data(), rows, vocab, 0);
  for (int k = 0; k < 3; ++k) {
    int64_t begin = bounds[k], local = bounds[k + 1] - begin;
    std::vector<float> shard(rows * local), expect(rows * local);
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(x.begin() + r * vocab + begin, local, shard.begin() + r * local);
      std::copy_n(full.begin() + r * vocab + begin, local, expect.begin() + r * local);
    }
    cross_entropy_backward(shard.data(), t.data(), f.lse.data(), dloss.data(), rows, local, begin);
    EXPECT_LE(testing::max_scaled_error(shard, expect, 1e-9, 1e-6), 1.0) << "shard " << k;
  }
}

TEST(CrossEntropy, TargetOutsideVocabularyThrowsNamingRowAndId) {
  std::vector<float> x(3 * 5, 0.0f), loss(3), lse(3);
  std::vector<int32_t> t = {1, 7, 2};
  try {
    cross_entropy_forward(x.data(), t.data(), loss.data(), lse.data(), 3, 5);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("row 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("7"), std::string::npos) << msg;
  }
  t[1] = -1;
  EXPECT_THROW(cross_entropy_forward(x.data(), t.data(), loss.data(), lse.data(), 3, 5), Error);
}

}  // namespace
}  // namespace tessera::kernels
