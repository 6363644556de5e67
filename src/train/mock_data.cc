#include "train/mock_data.h"

#include <algorithm>

#include "core/check.h"
#include "core/philox.h"

namespace tessera::train {

MockGptDataset::MockGptDataset(int64_t vocab, int64_t seq_length, uint64_t seed, int split)
    : vocab_(vocab), seq_length_(seq_length), seed_(seed), split_(split) {
  TESSERA_CHECK(vocab >= 2, "mock data: vocabulary of ", vocab, " is too small");
}

void MockGptDataset::get(int64_t index, std::span<int32_t> tokens) const {
  TESSERA_CHECK(static_cast<int64_t>(tokens.size()) == seq_length_ + 1, "mock data: sample buffer of ",
                tokens.size(), " tokens, expected ", seq_length_ + 1);
  PhiloxStream stream(seed_, mix_stream(static_cast<uint64_t>(split_), 0x6d6f636b));  // "mock"
  Philox4x32::Block r = stream.block(static_cast<uint64_t>(index));
  int64_t max_stride = std::min<int64_t>(vocab_ - 1, 8);
  int64_t start = r.v[0] % vocab_;
  int64_t stride = 1 + r.v[1] % max_stride;
  for (int64_t j = 0; j <= seq_length_; ++j) tokens[j] = static_cast<int32_t>((start + j * stride) % vocab_);
}

}  // namespace tessera::train
