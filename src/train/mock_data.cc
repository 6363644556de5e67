#include "train/mock_data.h"

#include <algorithm>
#include <vector>

#include "core/philox.h"

namespace tessera::train {

MockGptDataset::MockGptDataset(int64_t vocab, int64_t seq_length, uint64_t seed, Split split)
    : vocab_(vocab), seq_length_(seq_length), seed_(seed), split_(split) {
  TESSERA_CHECK(vocab >= 2, "mock data: vocabulary of ", vocab, " is too small");
}

void MockGptDataset::sample(int64_t index, int32_t* tokens) const {
  PhiloxStream stream(seed_, mix_stream(static_cast<uint64_t>(split_), 0x6d6f636b));  // "mock"
  Philox4x32::Block r = stream.block(static_cast<uint64_t>(index));
  int64_t max_stride = std::min<int64_t>(vocab_ - 1, 8);
  int64_t start = r.v[0] % vocab_;
  int64_t stride = 1 + r.v[1] % max_stride;
  for (int64_t j = 0; j <= seq_length_; ++j) tokens[j] = static_cast<int32_t>((start + j * stride) % vocab_);
}

model::MicroBatch MockGptDataset::micro_batch(int64_t first, int64_t batch) const {
  model::MicroBatch mb;
  mb.tokens = Tensor::empty({batch, seq_length_}, DType::I32);
  mb.labels = Tensor::empty({batch, seq_length_}, DType::I32);
  mb.loss_mask = Tensor::empty({batch, seq_length_});
  mb.loss_mask.fill_(1.0f);
  mb.sample_offset = first;
  std::vector<int32_t> buf(seq_length_ + 1);
  for (int64_t b = 0; b < batch; ++b) {
    sample(first + b, buf.data());
    std::copy(buf.begin(), buf.end() - 1, mb.tokens.i32() + b * seq_length_);
    std::copy(buf.begin() + 1, buf.end(), mb.labels.i32() + b * seq_length_);
  }
  return mb;
}

}  // namespace tessera::train
