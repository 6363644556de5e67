// The distillation loss kernels against float64: the KL at several temperatures, its combination over
// uneven vocabulary shards, the fused dlogits of dce CE + dkd τ KL by central differences, a teacher equal
// to the student (KL and its gradient exactly 0), large logits, and 16-bit rounding of the output.
#include "kernels/distillation_loss.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/testing.h"
#include "kernels/cross_entropy.h"
#include "kernels/precision.h"
#include "kernels/vocab_parallel_loss.h"

namespace tessera::kernels {
namespace {

Tensor tensor_of(const std::vector<float>& v, const Shape& shape) {
  Tensor t = Tensor::empty(shape);
  std::memcpy(t.raw(), v.data(), t.nbytes());
  return t;
}
std::vector<float> values_of(const Tensor& t) { return {t.f32(), t.f32() + t.numel()}; }

// float64 log-sum-exp of x[r, :] / temp.
template <typename T>
double ref_lse(const std::vector<T>& x, int64_t r, int64_t vocab, double temp) {
  double m = -INFINITY, s = 0;
  for (int64_t j = 0; j < vocab; ++j) m = std::max(m, x[r * vocab + j] / temp);
  for (int64_t j = 0; j < vocab; ++j) s += std::exp(x[r * vocab + j] / temp - m);
  return m + std::log(s);
}

// float64 KL(softmax(t_r / temp) || softmax(s_r / temp)).
template <typename T>
double ref_kl(const std::vector<T>& s, const std::vector<T>& t, int64_t r, int64_t vocab, double temp) {
  const double ls = ref_lse(s, r, vocab, temp), lt = ref_lse(t, r, vocab, temp);
  double kl = 0;
  for (int64_t j = 0; j < vocab; ++j) {
    const double log_pt = t[r * vocab + j] / temp - lt, log_ps = s[r * vocab + j] / temp - ls;
    kl += std::exp(log_pt) * (log_pt - log_ps);
  }
  return kl;
}

struct Forward {
  double kl_sum;
  Tensor kd_lse;
};

Forward forward(const Tensor& s, const Tensor& t, const Tensor& mask, float temp) {
  const int64_t rows = s.dim(0);
  Tensor stats = Tensor::empty({kDistillationStats, rows}), kd_lse = Tensor::empty({2, rows});
  distillation_shard_stats(s, t, temp, stats);
  return {distillation_kl_sum(stats, mask, kd_lse), kd_lse};
}

// The cross-entropy's log-sum-exp of every row (temperature 1), as the head keeps it.
Tensor ce_lse(const Tensor& logits, const Tensor& targets) {
  const int64_t rows = logits.dim(0);
  Tensor mx = Tensor::empty({rows}), se = Tensor::empty({rows}), tg = Tensor::empty({rows});
  Tensor lse = Tensor::empty({rows});
  cross_entropy_shard_stats(logits, targets, mx, se, tg, 0);
  masked_loss_sum(mx, se, tg, Tensor::zeros({rows}), lse);
  return lse;
}

Tensor targets_for(int64_t rows, int64_t vocab) {
  std::vector<int32_t> t(rows);
  for (int64_t r = 0; r < rows; ++r) t[r] = static_cast<int32_t>((7 * r + 3) % vocab);
  Tensor out = Tensor::empty({rows}, DType::I32);
  std::memcpy(out.raw(), t.data(), out.nbytes());
  return out;
}

TEST(DistillationLoss, KlMatchesFloat64AtEveryTemperature) {
  for (int64_t vocab : {13, 1000}) {
    for (float temp : {1.0f, 0.5f, 2.5f}) {
      const int64_t rows = 5;
      const std::vector<float> s = testing::random_vector(rows * vocab, 1, -4.0f, 4.0f);
      const std::vector<float> t = testing::random_vector(rows * vocab, 2, -4.0f, 4.0f);
      const std::vector<float> mask = {1, 0, 1, 0.5f, 1};
      const Forward f = forward(tensor_of(s, {rows, vocab}), tensor_of(t, {rows, vocab}), tensor_of(mask, {rows}), temp);
      double want = 0;
      std::vector<double> lse(2 * rows);
      for (int64_t r = 0; r < rows; ++r) {
        want += mask[r] * ref_kl(s, t, r, vocab, temp);
        lse[r] = ref_lse(s, r, vocab, temp);
        lse[rows + r] = ref_lse(t, r, vocab, temp);
      }
      EXPECT_NEAR(f.kl_sum, want, 1e-5 * std::abs(want) + 1e-6) << "vocab " << vocab << " temperature " << temp;
      EXPECT_LE(testing::max_scaled_error(values_of(f.kd_lse), lse, 1e-6, 1e-6), 1.0);
    }
  }
}

// Logits near +-1000 would overflow or underflow a naive exp; the maxima keep the sums finite. (The cross
// term is a float of the size of |t - s|, so the KL is known to ~1e-7 of that, not of itself.)
TEST(DistillationLoss, LargeLogitsStayFiniteAndAccurate) {
  const int64_t rows = 3, vocab = 500;
  std::vector<float> s = testing::random_vector(rows * vocab, 3, -2.0f, 2.0f);
  std::vector<float> t = testing::random_vector(rows * vocab, 4, -2.0f, 2.0f);
  const Tensor mask = tensor_of({1, 1, 1}, {rows});
  for (float shift : {1000.0f, -2000.0f}) {
    for (float& v : s) v += shift;
    for (float& v : t) v += shift;
    const Forward f = forward(tensor_of(s, {rows, vocab}), tensor_of(t, {rows, vocab}), mask, 1.0f);
    double want = 0;
    for (int64_t r = 0; r < rows; ++r) want += ref_kl(s, t, r, vocab, 1.0);
    EXPECT_TRUE(std::isfinite(f.kl_sum));
    EXPECT_NEAR(f.kl_sum, want, 1e-5 * std::abs(want) + 1e-6) << "logits shifted by " << shift;
  }
}

// Vocab-parallel: the statistics of uneven shards, maxima taken and sums rescaled and added as the tensor
// group does, give the one-shard KL and log-sum-exps; each shard's backward with them is its slice of
// the one-shard dlogits.
TEST(DistillationLoss, ShardStatisticsCombineToOneShard) {
  const int64_t rows = 6, vocab = 1000;
  const int64_t bounds[] = {0, 300, 750, vocab};
  const float temp = 2.0f;
  std::vector<float> s = testing::random_vector(rows * vocab, 5, -5.0f, 5.0f);
  std::vector<float> t = testing::random_vector(rows * vocab, 6, -5.0f, 5.0f);
  t[2 * vocab + 900] = 40.0f;  // a row whose teacher max sits in one shard only
  s[3 * vocab + 10] = 35.0f;   // and one whose student max does
  const Tensor student = tensor_of(s, {rows, vocab}), teacher = tensor_of(t, {rows, vocab});
  const Tensor mask = tensor_of({1, 1, 0, 1, 1, 0.25f}, {rows}), targets = targets_for(rows, vocab);
  const Forward whole = forward(student, teacher, mask, temp);

  std::vector<Tensor> shard_s, shard_t, stats;
  for (int k = 0; k < 3; ++k) {
    const int64_t begin = bounds[k], local = bounds[k + 1] - begin;
    std::vector<float> ps(rows * local), pt(rows * local);
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(s.begin() + r * vocab + begin, local, ps.begin() + r * local);
      std::copy_n(t.begin() + r * vocab + begin, local, pt.begin() + r * local);
    }
    shard_s.push_back(tensor_of(ps, {rows, local}));
    shard_t.push_back(tensor_of(pt, {rows, local}));
    stats.push_back(Tensor::empty({kDistillationStats, rows}));
    distillation_shard_stats(shard_s[k], shard_t[k], temp, stats[k]);
  }
  // The group's reduction, written out: the max of the maxima, then the rescaled sums added.
  Tensor global = stats[0].narrow(0, 2).clone();
  for (int k = 1; k < 3; ++k)
    for (int64_t i = 0; i < 2 * rows; ++i) global.f32()[i] = std::max(global.f32()[i], stats[k].f32()[i]);
  Tensor combined = Tensor::zeros({kDistillationStats, rows});
  combined.narrow(0, 2).copy_from(global);
  for (int k = 0; k < 3; ++k) {
    rescale_sum_exp(stats[k].narrow(kStudentSumExp, 1), stats[k].narrow(kStudentMax, 1), global.narrow(0, 1));
    rescale_sum_exp(stats[k].narrow(kTeacherSumExp, 1), stats[k].narrow(kTeacherMax, 1), global.narrow(1, 1));
    rescale_sum_exp(stats[k].narrow(kCrossSum, 1), stats[k].narrow(kTeacherMax, 1), global.narrow(1, 1));
    for (int64_t i = 2 * rows; i < kDistillationStats * rows; ++i) combined.f32()[i] += stats[k].f32()[i];
  }
  Tensor kd_lse = Tensor::empty({2, rows});
  const double kl = distillation_kl_sum(combined, mask, kd_lse);
  EXPECT_NEAR(kl, whole.kl_sum, 1e-5 * std::abs(whole.kl_sum));
  EXPECT_LE(testing::max_scaled_error(values_of(kd_lse), values_of(whole.kd_lse), 1e-6, 1e-6), 1.0);

  const Tensor lse = ce_lse(student, targets);
  const Tensor dce = tensor_of({1, -0.5f, 2, 0, 1, 0.3f}, {rows}), dkd = tensor_of({0.7f, 1, 1, -2, 0, 1}, {rows});
  Tensor full = student.clone();
  distillation_backward(full, teacher, targets, lse, dce, whole.kd_lse, dkd, temp, 0);
  for (int k = 0; k < 3; ++k) {
    const int64_t begin = bounds[k], local = bounds[k + 1] - begin;
    Tensor g = shard_s[k].clone();
    distillation_backward(g, shard_t[k], targets, lse, dce, kd_lse, dkd, temp, begin);
    std::vector<float> want(rows * local);
    for (int64_t r = 0; r < rows; ++r) std::copy_n(full.f32() + r * vocab + begin, local, want.begin() + r * local);
    EXPECT_LE(testing::max_scaled_error(values_of(g), want, 1e-7, 1e-5), 1.0) << "shard " << k;
  }
}

// d/ds of sum_r (dce_r CE_r + dkd_r τ KL_r) by float64 central differences, at several temperatures.
TEST(DistillationLoss, BackwardMatchesNumericGradient) {
  const int64_t rows = 3, vocab = 11;
  for (float temp : {1.0f, 0.7f, 3.0f}) {
    const std::vector<float> s = testing::random_vector(rows * vocab, 7, -2.0f, 2.0f);
    const std::vector<float> t = testing::random_vector(rows * vocab, 8, -2.0f, 2.0f);
    const std::vector<float> dce = {1.0f, -0.5f, 0.0f}, dkd = {0.5f, 2.0f, 1.5f};
    const Tensor targets = targets_for(rows, vocab);
    const std::vector<double> td = testing::to_double(t);
    auto objective = [&](const std::vector<double>& x) {
      double total = 0;
      for (int64_t r = 0; r < rows; ++r)
        total += dce[r] * (ref_lse(x, r, vocab, 1.0) - x[r * vocab + targets.i32()[r]]) +
                 dkd[r] * temp * ref_kl(x, td, r, vocab, temp);
      return total;
    };
    const std::vector<double> numeric = testing::numeric_gradient(objective, testing::to_double(s));
    const Tensor student = tensor_of(s, {rows, vocab}), teacher = tensor_of(t, {rows, vocab});
    const Forward f = forward(student, teacher, Tensor::zeros({rows}), temp);
    Tensor g = student.clone();
    distillation_backward(g, teacher, targets, ce_lse(student, targets), tensor_of(dce, {rows}), f.kd_lse,
                          tensor_of(dkd, {rows}), temp, 0);
    EXPECT_LE(testing::max_scaled_error(values_of(g), numeric, 2e-6, 1e-5), 1.0) << "temperature " << temp;
  }
}

// A teacher that is the student: the KL is exactly 0 and the dlogits are exactly the cross-entropy's.
TEST(DistillationLoss, TeacherEqualToStudentGivesZeroAndTheCrossEntropyGradient) {
  const int64_t rows = 4, vocab = 5000;  // two column chunks per row
  const Tensor student = tensor_of(testing::random_vector(rows * vocab, 9, -6.0f, 6.0f), {rows, vocab});
  const Tensor targets = targets_for(rows, vocab), mask = tensor_of({1, 1, 1, 1}, {rows});
  for (float temp : {1.0f, 2.0f}) {
    const Forward f = forward(student, student.clone(), mask, temp);
    EXPECT_EQ(f.kl_sum, 0.0) << "temperature " << temp;
    const Tensor lse = ce_lse(student, targets), dce = tensor_of({1, 0.5f, 2, 1}, {rows});
    Tensor g = student.clone(), ce = student.clone();
    distillation_backward(g, student, targets, lse, dce, f.kd_lse, tensor_of({3, 3, 3, 3}, {rows}), temp, 0,
                          DType::BF16);
    cross_entropy_backward(ce, targets, lse, dce, 0, DType::BF16);
    EXPECT_EQ(values_of(g), values_of(ce)) << "temperature " << temp;
  }
}

// 16-bit output is the fp32 output rounded; operands of the wrong shape are refused.
TEST(DistillationLoss, RoundedOutputAndShapeChecks) {
  const int64_t rows = 3, vocab = 17;
  const Tensor s = tensor_of(testing::random_vector(rows * vocab, 10), {rows, vocab});
  const Tensor t = tensor_of(testing::random_vector(rows * vocab, 11), {rows, vocab});
  const Tensor targets = targets_for(rows, vocab), ones = tensor_of({1, 1, 1}, {rows});
  const Forward f = forward(s, t, ones, 1.5f);
  const Tensor lse = ce_lse(s, targets);
  Tensor g32 = s.clone(), g16 = s.clone();
  distillation_backward(g32, t, targets, lse, ones, f.kd_lse, ones, 1.5f, 0);
  distillation_backward(g16, t, targets, lse, ones, f.kd_lse, ones, 1.5f, 0, DType::BF16);
  Tensor rounded = Tensor::empty({rows, vocab});
  round_to(DType::BF16, g32, rounded);
  EXPECT_EQ(values_of(g16), values_of(rounded));
  Tensor stats = Tensor::empty({kDistillationStats, rows});
  EXPECT_THROW(distillation_shard_stats(s, Tensor::empty({rows, vocab + 1}), 1.0f, stats), Error);
  EXPECT_THROW(distillation_shard_stats(s, t, 1.0f, Tensor::empty({rows})), Error);
  EXPECT_THROW(distillation_kl_sum(stats, ones, Tensor::empty({rows})), Error);
}

}  // namespace
}  // namespace tessera::kernels
