// The fused training pass of the cross-entropy (kernels/cross_entropy.h's cross_entropy_fused, the CPU
// counterpart of the GPU's one-block-per-row kernel): its statistics, lse and in-place gradient are the
// unfused calls' (cross_entropy_shard_stats, masked_loss_sum's lse, cross_entropy_backward) bit for bit,
// fp32 logits with every output rounding and bf16 logits; and its gradient is the float64 one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "core/philox.h"
#include "core/tensor.h"
#include "core/testing.h"
#include "kernels/cross_entropy.h"
#include "kernels/vocab_parallel_loss.h"

namespace tessera::kernels {
namespace {

Tensor random_logits(int64_t rows, int64_t vocab, uint64_t seed) {
  Tensor t = Tensor::empty({rows, vocab});
  auto v = testing::random_vector(static_cast<size_t>(rows * vocab), seed, -8.0f, 8.0f);
  std::memcpy(t.raw(), v.data(), t.nbytes());
  if (rows > 2) t.f32()[vocab + vocab / 2] = 40.0f;  // a row with one dominant logit (p near 1)
  return t;
}

Tensor random_ids(int64_t rows, int64_t vocab, uint64_t seed) {
  PhiloxStream rng(seed, 1);
  Tensor t = Tensor::empty({rows}, DType::I32);
  for (int64_t r = 0; r < rows; ++r) t.i32()[r] = static_cast<int32_t>(rng.bits(r) % vocab);
  return t;
}

Tensor per_row(int64_t rows, uint64_t seed, float lo, float hi) {
  Tensor t = Tensor::empty({rows});
  auto v = testing::random_vector(static_cast<size_t>(rows), seed, lo, hi);
  std::memcpy(t.raw(), v.data(), t.nbytes());
  return t;
}

// bf16 storage of fp32 values, and back.
Tensor to_bf16(const Tensor& x) {
  Tensor t = Tensor::empty(x.shape(), DType::BF16);
  for (int64_t i = 0; i < x.numel(); ++i) t.bf16()[i] = fp32_to_bf16(x.f32()[i]);
  return t;
}
Tensor to_f32(const Tensor& x) {
  Tensor t = Tensor::empty(x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) t.f32()[i] = bf16_to_fp32(x.bf16()[i]);
  return t;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// The unfused calls as the output layer made them: statistics, lse (masked_loss_sum), backward.
struct Unfused {
  Tensor grad, max, sumexp, target, lse;
};
Unfused unfused(const Tensor& logits, const Tensor& targets, const Tensor& dloss, DType round_output) {
  const int64_t rows = logits.dim(0);
  Unfused u{logits.clone(), Tensor::empty({rows}), Tensor::empty({rows}), Tensor::empty({rows}), Tensor::empty({rows})};
  cross_entropy_shard_stats(u.grad, targets, u.max, u.sumexp, u.target, 0);
  masked_loss_sum(u.max, u.sumexp, u.target, Tensor::zeros({rows}), u.lse);
  cross_entropy_backward(u.grad, targets, u.lse, dloss, 0, round_output);
  return u;
}

struct Shape2 {
  int64_t rows, vocab;
};
const Shape2 kShapes[] = {{1, 1}, {3, 7}, {5, 4096}, {4, 4099}, {6, 50304}};

TEST(CrossEntropyFused, EqualsTheUnfusedCallsBitForBit) {
  for (const Shape2& s : kShapes) {
    const Tensor logits = random_logits(s.rows, s.vocab, 1), targets = random_ids(s.rows, s.vocab, 2);
    const Tensor dloss = per_row(s.rows, 3, 0.0f, 2.0f);
    for (DType round : {DType::F32, DType::BF16, DType::F16}) {
      SCOPED_TRACE(::testing::Message() << s.rows << "x" << s.vocab << " " << dtype_name(round));
      const Unfused want = unfused(logits, targets, dloss, round);
      Tensor grad = logits.clone(), max = Tensor::empty({s.rows}), sumexp = Tensor::empty({s.rows});
      Tensor target = Tensor::empty({s.rows}), lse = Tensor::empty({s.rows});
      cross_entropy_fused(grad, targets, dloss, max, sumexp, target, lse, round);
      EXPECT_TRUE(same_bits(grad, want.grad));
      EXPECT_TRUE(same_bits(max, want.max));
      EXPECT_TRUE(same_bits(sumexp, want.sumexp));
      EXPECT_TRUE(same_bits(target, want.target));
      EXPECT_TRUE(same_bits(lse, want.lse));
    }
  }
}

// bf16 logits: the unfused fp32 path on the same (widened) values with the gradient rounded to bf16.
TEST(CrossEntropyFused, Bf16LogitsGiveTheFp32PathRoundedToBf16) {
  for (const Shape2& s : kShapes) {
    SCOPED_TRACE(::testing::Message() << s.rows << "x" << s.vocab);
    const Tensor wide = to_f32(to_bf16(random_logits(s.rows, s.vocab, 4)));  // bf16 values in fp32
    const Tensor targets = random_ids(s.rows, s.vocab, 5), dloss = per_row(s.rows, 6, 0.0f, 2.0f);
    const Unfused want = unfused(wide, targets, dloss, DType::BF16);
    Tensor logits = to_bf16(wide), max = Tensor::empty({s.rows}), sumexp = Tensor::empty({s.rows});
    Tensor target = Tensor::empty({s.rows}), lse = Tensor::empty({s.rows});
    cross_entropy_fused(logits, targets, dloss, max, sumexp, target, lse);
    EXPECT_TRUE(same_bits(to_f32(logits), want.grad));
    EXPECT_TRUE(same_bits(lse, want.lse));
    EXPECT_TRUE(same_bits(target, want.target));
  }
}

// The gradient against float64: (softmax - one-hot) * dloss from the float64 log-sum-exp.
TEST(CrossEntropyFused, GradientMatchesFloat64) {
  const int64_t rows = 4, vocab = 5003;
  const Tensor logits = random_logits(rows, vocab, 7), targets = random_ids(rows, vocab, 8);
  const Tensor dloss = per_row(rows, 9, 0.5f, 2.0f);
  std::vector<double> ref(static_cast<size_t>(rows * vocab));
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits.f32() + r * vocab;
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < vocab; ++j) m = std::max(m, static_cast<double>(x[j]));
    for (int64_t j = 0; j < vocab; ++j) s += std::exp(x[j] - m);
    const double lse = m + std::log(s);
    for (int64_t j = 0; j < vocab; ++j)
      ref[r * vocab + j] = (std::exp(x[j] - lse) - (j == targets.i32()[r])) * dloss.f32()[r];
  }
  Tensor grad = logits.clone(), max = Tensor::empty({rows}), sumexp = Tensor::empty({rows});
  Tensor target = Tensor::empty({rows}), lse = Tensor::empty({rows});
  cross_entropy_fused(grad, targets, dloss, max, sumexp, target, lse);
  std::vector<float> got(grad.f32(), grad.f32() + grad.numel());
  // lse is kept in fp32 (an ulp of ~10), so a probability near 1 is known to ~1e-6 absolute.
  EXPECT_LE(testing::max_scaled_error(got, ref, 2e-6, 1e-5), 1.0);
}

TEST(CrossEntropyFused, RefusesOtherLogitTypesAndShapesNamingThem) {
  const Tensor targets = random_ids(2, 5, 1), row = Tensor::empty({2});
  try {
    cross_entropy_fused(Tensor::zeros({2, 5}, DType::F16), targets, row, row, row, row, row);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fp16"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cross_entropy_fused(Tensor::zeros({3, 5}), targets, row, row, row, row, row), Error);
}

}  // namespace
}  // namespace tessera::kernels
