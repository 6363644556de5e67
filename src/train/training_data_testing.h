// Helpers of the tests that the trainer's micro-batches are the samples `tessera samples` prints: a row of a
// micro-batch against Megatron's fields of one sample (BatchSource::megatron_sample).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "core/check.h"
#include "train/batching.h"

namespace tessera::train::testing {

inline int32_t at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::I32 ? t.i32()[i] : static_cast<int32_t>(t.f32()[i]);
}

inline const SampleField& field(const MegatronSample& s, const std::string& name) {
  for (const SampleField& f : s)
    if (f.name == name) return f;
  throw Error(str_cat("no field ", name));
}

// Row b of `mb` against GPTDataset's fields of the same sample.
inline void expect_gpt_row(const model::MicroBatch& mb, int64_t b, const MegatronSample& s) {
  const int64_t seq = mb.tokens.shape()[1];
  for (int64_t j = 0; j < seq; ++j) {
    ASSERT_EQ(at(mb.tokens, b * seq + j), field(s, "tokens").values[j]) << "position " << j;
    ASSERT_EQ(at(mb.labels, b * seq + j), field(s, "labels").values[j]) << "position " << j;
    ASSERT_EQ(at(mb.loss_mask, b * seq + j), field(s, "loss_mask").values[j]) << "position " << j;
    ASSERT_EQ(mb.positions.defined() ? at(mb.positions, b * seq + j) : j, field(s, "position_ids").values[j]);
  }
}

// Row b of `mb` against BERT's fields: the trainer's labels are 0 where Megatron's are -1 (not predicted),
// its padding mask and token types 0 on padding.
inline void expect_bert_row(const model::MicroBatch& mb, int64_t b, const MegatronSample& s) {
  const int64_t seq = mb.tokens.shape()[1];
  for (int64_t j = 0; j < seq; ++j) {
    const int64_t label = field(s, "labels").values[j], padding = field(s, "padding_mask").values[j];
    ASSERT_EQ(at(mb.tokens, b * seq + j), field(s, "text").values[j]) << "position " << j;
    ASSERT_EQ(at(mb.loss_mask, b * seq + j), field(s, "loss_mask").values[j]) << "position " << j;
    ASSERT_EQ(at(mb.labels, b * seq + j), label < 0 ? 0 : label) << "position " << j;
    ASSERT_EQ(at(mb.padding_mask, b * seq + j), padding == 1 ? 1 : 0) << "position " << j;
    ASSERT_EQ(at(mb.token_types, b * seq + j), padding == 1 ? field(s, "types").values[j] : 0) << "position " << j;
  }
  EXPECT_EQ(at(mb.sentence_order, b), field(s, "is_random").values[0]);
}

}  // namespace tessera::train::testing
