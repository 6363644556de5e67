#include "train/bert_batching.h"

#include "core/check.h"

namespace tessera::train {

model::MicroBatch BertBatches::micro_batch(int64_t first, int64_t batch) const {
  const int64_t seq = data_->seq_length();
  model::MicroBatch mb;
  mb.tokens = Tensor::empty({batch, seq}, DType::I32);
  mb.labels = Tensor::empty({batch, seq}, DType::I32);
  mb.loss_mask = Tensor::empty({batch, seq});
  mb.padding_mask = Tensor::empty({batch, seq}, DType::I32);
  if (binary_head_) {
    mb.token_types = Tensor::empty({batch, seq}, DType::I32);
    mb.sentence_order = Tensor::empty({batch}, DType::I32);
  }
  mb.sample_offset = first;
  for (int64_t b = 0; b < batch; ++b) {
    const data::BertSample s = data_->get(first + b);
    TESSERA_CHECK(static_cast<int64_t>(s.tokens.size()) == seq, "BERT sample ", first + b, " has ", s.tokens.size(),
                  " tokens, expected ", seq);
    for (int64_t j = 0; j < seq; ++j) {
      const int64_t at = b * seq + j;
      mb.tokens.host_i32()[at] = s.tokens[j];
      mb.loss_mask.host_f32()[at] = s.loss_mask[j];
      mb.labels.host_i32()[at] = s.loss_mask[j] != 0.0f ? s.labels[j] : 0;
      mb.padding_mask.host_i32()[at] = s.padding_mask[j] == 1 ? 1 : 0;
      if (binary_head_) mb.token_types.host_i32()[at] = s.padding_mask[j] == 1 ? s.types[j] : 0;
    }
    if (binary_head_) mb.sentence_order.host_i32()[b] = s.is_random;
  }
  return mb;
}

MegatronSample bert_megatron_sample(const data::BertSample& s) {
  auto widen = [](const auto& v) { return std::vector<int64_t>(v.begin(), v.end()); };
  return {{"text", widen(s.tokens)},
          {"types", widen(s.types)},
          {"labels", widen(s.labels)},
          {"is_random", {s.is_random}, true},
          {"padding_mask", widen(s.padding_mask)},
          {"loss_mask", widen(s.loss_mask)},
          {"truncated", {s.truncated ? 1 : 0}, true}};
}

MegatronSample bert_megatron_sample(const model::MicroBatch& mb) {
  const int64_t seq = mb.tokens.shape()[1];
  data::BertSample s;
  for (int64_t j = 0; j < seq; ++j) {
    const bool predicted = mb.loss_mask.host_f32()[j] != 0.0f;
    s.tokens.push_back(mb.tokens.host_i32()[j]);
    s.types.push_back(mb.token_types.defined() ? mb.token_types.host_i32()[j] : 0);
    s.labels.push_back(predicted ? mb.labels.host_i32()[j] : -1);
    s.loss_mask.push_back(mb.loss_mask.host_f32()[j]);
    s.padding_mask.push_back(mb.padding_mask.host_i32()[j]);
  }
  s.is_random = mb.sentence_order.defined() ? mb.sentence_order.host_i32()[0] : 0;
  return bert_megatron_sample(s);
}

data::MaskingVocabulary masking_vocabulary(const data::Tokenizer& t) {
  TESSERA_CHECK(t.cls() >= 0 && t.sep() >= 0 && t.mask() >= 0 && t.pad() >= 0, "--tokenizer-type ", t.name(),
                " has no [CLS], [SEP], [MASK] and [PAD] tokens; BERT needs BertWordPieceLowerCase or "
                "BertWordPieceCase");
  return data::make_masking_vocabulary(t.vocab_size(), [&t](int32_t id) { return t.token_text(id); }, t.cls(), t.sep(),
                                       t.mask(), t.pad());
}

}  // namespace tessera::train
