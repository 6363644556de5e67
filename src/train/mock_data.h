// --mock-data: a deterministic, learnable synthetic corpus. Sample i is an arithmetic progression
// modulo the vocabulary, tokens[j] = (start + j * stride) mod vocab, with start and stride drawn from
// Philox keyed by (seed, split, i). After two tokens the rest of a sample is predictable, so a working
// model's loss falls far below ln(vocab); and any sample can be produced in any order, so the data
// position after a resume is just the number of samples consumed.
#pragma once

#include <cstdint>

#include "model/gpt_model.h"

namespace tessera::train {

enum class Split : uint64_t { Train = 0, Validation = 1 };

class MockGptDataset {
 public:
  MockGptDataset(int64_t vocab, int64_t seq_length, uint64_t seed, Split split);

  // seq_length + 1 tokens of sample `index`.
  void sample(int64_t index, int32_t* tokens) const;
  // Samples [first, first + batch) as inputs, next-token labels and an all-ones loss mask.
  model::MicroBatch micro_batch(int64_t first, int64_t batch) const;

 private:
  int64_t vocab_, seq_length_;
  uint64_t seed_;
  Split split_;
};

}  // namespace tessera::train
