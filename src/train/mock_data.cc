#include "train/mock_data.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "core/philox.h"
#include "train/bert_batching.h"

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

MockBertBatches::MockBertBatches(int64_t vocab, int64_t seq_length, uint64_t seed, int split, bool binary_head)
    : vocab_(vocab), seq_length_(seq_length), seed_(seed), split_(split), binary_head_(binary_head) {
  TESSERA_CHECK(vocab >= kFirstWord + 4, "mock BERT data: vocabulary of ", vocab, " is too small (at least ",
                kFirstWord + 4, ": four special ids and four words)");
  TESSERA_CHECK(seq_length >= 6, "mock BERT data: --seq-length ", seq_length, " is too short (at least 6)");
}

model::MicroBatch MockBertBatches::micro_batch(int64_t first, int64_t batch) const {
  const int64_t seq = seq_length_, words = vocab_ - kFirstWord;
  model::MicroBatch mb;
  mb.tokens = Tensor::zeros({batch, seq}, DType::I32);
  mb.labels = Tensor::zeros({batch, seq}, DType::I32);
  mb.loss_mask = Tensor::zeros({batch, seq});
  mb.padding_mask = Tensor::zeros({batch, seq}, DType::I32);
  if (binary_head_) {
    mb.token_types = Tensor::zeros({batch, seq}, DType::I32);
    mb.sentence_order = Tensor::zeros({batch}, DType::I32);
  }
  mb.sample_offset = first;
  const PhiloxStream stream(seed_, mix_stream(static_cast<uint64_t>(split_), 0x62657274));  // "bert"
  for (int64_t b = 0; b < batch; ++b) {
    // Elements [key, key + 4 + seq) of the stream belong to this sample.
    const uint64_t key = static_cast<uint64_t>(first + b) * (static_cast<uint64_t>(seq) + 4);
    const uint32_t r[4] = {stream.bits(key), stream.bits(key + 1), stream.bits(key + 2), stream.bits(key + 3)};
    // Tokens, specials included: at least five, so that each segment has a word.
    const int64_t n = std::max<int64_t>(5, seq - static_cast<int64_t>(r[0] % (seq / 2 + 1)));
    const int64_t start = r[1] % words, stride = 1 + r[2] % std::min<int64_t>(words - 1, 5);
    // Words: n - 2 (one segment: CLS ... SEP) or n - 3 (two: CLS A SEP B SEP).
    const int64_t count = binary_head_ ? n - 3 : n - 2, a_len = binary_head_ ? 1 + r[3] % (count - 1) : count;
    const bool swapped = binary_head_ && (r[3] >> 16) % 2 == 1;
    std::vector<int32_t> a, bseg;
    for (int64_t j = 0; j < count; ++j)
      (j < a_len ? a : bseg).push_back(static_cast<int32_t>(kFirstWord + (start + j * stride) % words));
    if (swapped) std::swap(a, bseg);
    int32_t* tokens = mb.tokens.host_i32() + b * seq;
    int32_t* types = binary_head_ ? mb.token_types.host_i32() + b * seq : nullptr;
    int64_t at = 0;
    auto put = [&](int32_t id, int32_t type) {
      tokens[at] = id;
      if (types) types[at] = type;
      mb.padding_mask.host_i32()[b * seq + at] = 1;
      ++at;
    };
    put(kCls, 0);
    for (int32_t id : a) put(id, 0);
    put(kSep, 0);
    if (binary_head_) {
      for (int32_t id : bseg) put(id, 1);
      put(kSep, 1);
      mb.sentence_order.host_i32()[b] = swapped ? 1 : 0;
    }
    // Mask words with probability 0.15, at least one.
    int64_t masked = 0;
    for (int64_t j = 0; j < n; ++j) {
      if (tokens[j] < kFirstWord) continue;
      const bool mask = stream.uniform(key + 4 + static_cast<uint64_t>(j)) < 0.15f;
      if (!mask && !(masked == 0 && j == n - 2)) continue;  // the last word if none was drawn
      mb.labels.host_i32()[b * seq + j] = tokens[j];
      mb.loss_mask.host_f32()[b * seq + j] = 1.0f;
      tokens[j] = kMask;
      ++masked;
    }
  }
  return mb;
}

MegatronSample MockBertBatches::megatron_sample(int64_t index) const {
  return bert_megatron_sample(micro_batch(index, 1));
}

}  // namespace tessera::train
