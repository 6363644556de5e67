// The probability, ratio and fraction flags reach what they feed as the doubles Python would hold:
// Megatron rounds with them, and a float lands on the other side of a rounding tie.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/check.h"
#include "data/bert_dataset.h"
#include "train/args/arguments.h"
#include "train/trainer_testing.h"

namespace tessera::train {
namespace {

TrainArguments parse(const std::string& extra) {
  return parse_train_arguments(testing::split_flags(
      "--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data "
      "--tokenizer-type NullTokenizer --vocab-size 200 --lr 1e-3 --train-iters 10 " + extra));
}

// Ids 0..3 special, the rest whole words: every token but [CLS] and [SEP] is a masking candidate.
data::MaskingVocabulary word_vocabulary() {
  return data::make_masking_vocabulary(200, [](int32_t id) { return str_cat("w", id); }, /*cls=*/1,
                                       /*sep=*/2, /*mask=*/3, /*pad=*/0);
}

// masked_dataset.py masks min(p * target, max(1, round(n * p))) of n tokens ([CLS] and [SEP] counted).
// At n = 30, 70, 110 and p = 0.15, n * p is a tie in double (4.5, 10.5, 16.5) that Python's round takes
// to the even side (python3: round(30 * 0.15) == 4, round(70 * 0.15) == 10, round(110 * 0.15) == 16),
// while 0.15f makes it 4.50000018, rounded up to 5.
TEST(ProbabilityFlags, MaskCountsAtRoundingTiesArePythons) {
  const TrainArguments a = parse("--model-family bert --mask-prob 0.15");
  const data::MaskingVocabulary vocab = word_vocabulary();
  const std::vector<std::pair<int, int64_t>> cases = {{30, 4}, {70, 10}, {110, 16}};
  for (const auto& [n, python] : cases) {
    const double tie = static_cast<double>(n) * 0.15;
    ASSERT_EQ(tie - std::floor(tie), 0.5) << n << " x 0.15 is not a tie in double";
    const int64_t expected = static_cast<int64_t>(std::nearbyint(tie));  // half to even, as Python's round
    ASSERT_EQ(expected, python) << n;
    std::vector<int32_t> tokens{vocab.cls};
    for (int i = 0; i + 2 < n; ++i) tokens.push_back(4 + i);
    tokens.push_back(vocab.sep);
    data::NumpyRandomState rng(1234);
    // A long target, so that the count, not mask_prob x target, is the bound.
    const data::MaskedLmPredictions masked = data::create_masked_lm_predictions(tokens, 512, a.mask_prob, vocab, rng);
    EXPECT_EQ(static_cast<int64_t>(masked.positions.size()), expected) << n << " tokens";
  }
}

// helpers.cpp's ratio is C's round(1.0 / short_seq_prob), half away from zero: 1 / 0.4 is 2.5 in double,
// ratio 3, but 2.49999996 from 0.4f, ratio 2 (and 1 / (2 / 9.0) = 4.5, ratio 5, not 4).
TEST(ProbabilityFlags, ShortSeqRatioIsRoundedFromTheDouble) {
  for (const auto& [flag, ratio] : std::vector<std::pair<std::string, double>>{{"0.4", 3}, {"0.2222222222222222", 5}}) {
    const TrainArguments a = parse("--model-family bert --short-seq-prob " + flag);
    EXPECT_EQ(a.short_seq_prob, std::stod(flag));
    EXPECT_EQ(std::round(1.0 / a.short_seq_prob), ratio) << flag;
  }
}

// The same sentences and seed give helpers.cpp's mapping for the double 0.4, not for 0.4f.
TEST(ProbabilityFlags, ShortSeqMappingFollowsTheDouble) {
  const TrainArguments a = parse("--model-family bert --short-seq-prob 0.4");
  const std::vector<int32_t> sizes(400, 6);  // one document of 400 sentences of 6 tokens
  const std::vector<int64_t> docs = {0, 400};
  auto mapping = [&](double p) { return data::build_bert_sample_mapping(docs, sizes, 1, 1, 64, p, 1234, 2); };
  EXPECT_EQ(mapping(a.short_seq_prob), mapping(0.4));
  ASSERT_NE(mapping(0.4), mapping(static_cast<double>(0.4f))) << "the case no longer tells float from double";
}

// Megatron's int(lr_warmup_fraction * lr_decay_iters): 0.7 x 10 is 7.0 in double (python3), 6.99999988 from
// 0.7f.
TEST(ProbabilityFlags, WarmupFractionTruncatesTheDouble) {
  const TrainArguments a = parse("--lr-warmup-fraction 0.7");
  EXPECT_EQ(a.lr_warmup_iters, static_cast<int64_t>(0.7 * 10));
  EXPECT_EQ(a.lr_warmup_iters, 7);
}

// Megatron's int(kv_channels * rotary_percent): 40 x 0.7 is 28.0 in double (python3), 27.9999995 from
// 0.7f, whose even part is 26.
TEST(ProbabilityFlags, RotaryPercentTruncatesTheDouble) {
  const TrainArguments a =
      parse("--hidden-size 160 --num-attention-heads 4 --position-embedding-type rope --rotary-percent 0.7");
  ASSERT_EQ(a.model.kv_channels, 40);
  EXPECT_EQ(a.model.rotary_dim(), static_cast<int64_t>(40 * 0.7) / 2 * 2);
  EXPECT_EQ(a.model.rotary_dim(), 28);
}

}  // namespace
}  // namespace tessera::train
