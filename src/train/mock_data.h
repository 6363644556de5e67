// --mock-data: a deterministic, learnable synthetic corpus. Sample i is an arithmetic progression
// modulo the vocabulary, tokens[j] = (start + j * stride) mod vocab, with start and stride drawn from
// Philox keyed by (seed, split, i). After two tokens the rest of a sample is predictable, so a working
// model's loss falls far below ln(vocab); and any sample can be produced in any order, so the data
// position after a resume is just the number of samples consumed.
#pragma once

#include <cstdint>
#include <limits>

#include "data/gpt_dataset.h"

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

}  // namespace tessera::train
