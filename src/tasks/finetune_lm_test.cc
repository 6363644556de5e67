// The sequences of MEGATRON-CNTRL's keyword and generator fine-tuning: one (prompt, target) pair per
// row, the loss on the target and the end of document, and what a long pair loses.
#include "tasks/finetune_lm.h"

#include <gtest/gtest.h>

#include "core/check.h"
#include "data/null_tokenizer.h"

namespace tessera::tasks {
namespace {

using Ids = std::vector<int32_t>;

// "a b c" of n words counting up from `first`: the NullTokenizer's ids first, first + 1, ...
std::string ids_text(int32_t first, int32_t n) {
  std::string out;
  for (int32_t i = 0; i < n; ++i) out.append(i ? " " : "").append(std::to_string(first + i));
  return out;
}

Ids count_up(int32_t first, int32_t n) {
  Ids out;
  for (int32_t i = 0; i < n; ++i) out.push_back(first + i);
  return out;
}

Ids concat(Ids a, const Ids& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(TokenizePair, PromptThenTargetThenTheEndOfDocument) {
  const data::NullTokenizer tok(100);
  const TokenizedPair p = tokenize_pair({ids_text(1, 3), ids_text(50, 2)}, tok, 8);
  EXPECT_EQ(p.ids, (Ids{1, 2, 3, 50, 51, 100}));
  EXPECT_EQ(p.target_start, 3);
  // Exactly seq_length + 1 ids still fit whole.
  EXPECT_EQ(tokenize_pair({ids_text(1, 5), ids_text(50, 3)}, tok, 8).ids,
            concat(concat(count_up(1, 5), count_up(50, 3)), {100}));
}

TEST(TokenizePair, ALongPromptLosesItsStart) {
  const data::NullTokenizer tok(100);
  const TokenizedPair p = tokenize_pair({ids_text(1, 20), ids_text(50, 2)}, tok, 7);  // room for 8 ids
  EXPECT_EQ(p.ids, concat(concat(count_up(16, 5), {50, 51}), {100}));
  EXPECT_EQ(p.target_start, 5);
}

TEST(TokenizePair, ALongTargetKeepsHalfTheRoomAndLosesItsEnd) {
  const data::NullTokenizer tok(100);
  // Both long: the target keeps half the room (its end, the end of document among it, is cut), the
  // prompt the rest, from its end.
  const TokenizedPair both = tokenize_pair({ids_text(1, 20), ids_text(50, 20)}, tok, 7);
  EXPECT_EQ(both.ids, concat(count_up(17, 4), count_up(50, 4)));
  EXPECT_EQ(both.target_start, 4);
  // A short prompt keeps all its ids; the target takes the rest.
  const TokenizedPair short_prompt = tokenize_pair({ids_text(1, 2), ids_text(50, 20)}, tok, 7);
  EXPECT_EQ(short_prompt.ids, concat({1, 2}, count_up(50, 6)));
  EXPECT_EQ(short_prompt.target_start, 2);
  // An empty prompt: the target from the first id.
  const TokenizedPair no_prompt = tokenize_pair({"", ids_text(50, 2)}, tok, 7);
  EXPECT_EQ(no_prompt.ids, (Ids{50, 51, 100}));
  EXPECT_EQ(no_prompt.target_start, 0);
}

TEST(PromptTargetMicroBatch, LabelsAreShiftedAndTheLossCoversTheTargetOnly) {
  const data::NullTokenizer tok(100);
  const int64_t seq = 6;
  const std::vector<TokenizedPair> pairs{tokenize_pair({ids_text(1, 3), ids_text(50, 2)}, tok, seq),   // 6 ids
                                         tokenize_pair({ids_text(10, 5), ids_text(60, 1)}, tok, seq),  // 7 ids
                                         tokenize_pair({"", ids_text(70, 1)}, tok, seq)};              // 2 ids
  const std::vector<int64_t> indices{1, 0, 2};
  const model::MicroBatch mb = prompt_target_micro_batch(pairs, indices, seq, /*pad=*/100);
  ASSERT_EQ(mb.tokens.shape(), Shape({3, seq}));
  ASSERT_EQ(mb.labels.shape(), Shape({3, seq}));
  ASSERT_EQ(mb.loss_mask.shape(), Shape({3, seq}));
  auto row = [&](const Tensor& t, int64_t r) {
    return Ids(t.i32() + r * seq, t.i32() + (r + 1) * seq);
  };
  auto mask = [&](int64_t r) { return std::vector<float>(mb.loss_mask.f32() + r * seq, mb.loss_mask.f32() + (r + 1) * seq); };
  // Row 0 is pair 1: 10..14, 60, eod; the loss on the labels 60 and eod.
  EXPECT_EQ(row(mb.tokens, 0), (Ids{10, 11, 12, 13, 14, 60}));
  EXPECT_EQ(row(mb.labels, 0), (Ids{11, 12, 13, 14, 60, 100}));
  EXPECT_EQ(mask(0), (std::vector<float>{0, 0, 0, 0, 1, 1}));
  // Row 1 is pair 0: one position of padding, outside the loss.
  EXPECT_EQ(row(mb.tokens, 1), (Ids{1, 2, 3, 50, 51, 100}));
  EXPECT_EQ(row(mb.labels, 1), (Ids{2, 3, 50, 51, 100, 100}));
  EXPECT_EQ(mask(1), (std::vector<float>{0, 0, 1, 1, 1, 0}));
  // Row 2: no prompt; the first target id is an input, never a label.
  EXPECT_EQ(row(mb.tokens, 2), (Ids{70, 100, 100, 100, 100, 100}));
  EXPECT_EQ(row(mb.labels, 2), (Ids{100, 100, 100, 100, 100, 100}));
  EXPECT_EQ(mask(2), (std::vector<float>{1, 0, 0, 0, 0, 0}));
  // A pair built for a longer sequence does not fit.
  const std::vector<TokenizedPair> long_pair{tokenize_pair({ids_text(1, 9), ids_text(50, 2)}, tok, 10)};
  EXPECT_THROW(prompt_target_micro_batch(long_pair, std::vector<int64_t>{0}, seq, 100), Error);
  EXPECT_THROW(prompt_target_micro_batch(pairs, std::vector<int64_t>{}, seq, 100), Error);
}

}  // namespace
}  // namespace tessera::tasks
