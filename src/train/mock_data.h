// --mock-data: a deterministic, learnable synthetic corpus. Sample i is an arithmetic progression
// modulo the vocabulary, tokens[j] = (start + j * stride) mod vocab, with start and stride drawn from
// Philox keyed by (seed, split, i). After two tokens the rest of a sample is predictable, so a working
// model's loss falls far below ln(vocab); and any sample can be produced in any order, so the data
// position after a resume is just the number of samples consumed.
#pragma once

#include <cstdint>
#include <limits>

#include "data/gpt_dataset.h"
#include "train/batching.h"

namespace tessera::train {

class MockGptDataset final : public data::TokenDataset {
 public:
  // split: 0 train, 1 validation, 2 test (different samples).
  MockGptDataset(int64_t vocab, int64_t seq_length, uint64_t seed, int split);

  int64_t size() const override { return std::numeric_limits<int64_t>::max() / 2; }
  int64_t seq_length() const override { return seq_length_; }
  void get(int64_t index, std::span<int32_t> tokens) const override;
  using data::TokenDataset::get;

 private:
  int64_t vocab_, seq_length_;
  uint64_t seed_;
  int split_;
};

// --mock-data for BERT: learnable masked-LM and sentence-order samples over a NullTokenizer's ids.
// Ids 0..3 are [PAD] [CLS] [SEP] [MASK], the words 4..vocab-1. Sample i (Philox keyed by seed, split and
// i) holds n of seq_length positions, n >= seq_length / 2 (the rest padding): an arithmetic progression
// of words, cut into segments A and B, swapped with probability 1/2 (sentence_order 1), laid out as
// [CLS] A [SEP] B [SEP] with token types 0 and 1; each word is masked with probability 0.15 (at least
// one), replaced by [MASK] and predicted from its neighbours.
class MockBertBatches final : public BatchSource {
 public:
  static constexpr int32_t kPad = 0, kCls = 1, kSep = 2, kMask = 3, kFirstWord = 4;
  MockBertBatches(int64_t vocab, int64_t seq_length, uint64_t seed, int split, bool binary_head);
  int64_t size() const override { return std::numeric_limits<int64_t>::max() / 2; }
  model::MicroBatch micro_batch(int64_t first, int64_t batch) const override;
  MegatronSample megatron_sample(int64_t index) const override;

 private:
  int64_t vocab_, seq_length_;
  uint64_t seed_;
  int split_;
  bool binary_head_;
};

}  // namespace tessera::train
