#include "train/batching.h"

#include <vector>

namespace tessera::train {

model::MicroBatch make_micro_batch(const data::TokenDataset& data, int64_t first, int64_t batch,
                                   const BatchOptions& o) {
  const int64_t seq = data.seq_length();
  // On the host, whatever the default device: the loop below writes them (the trainer moves a copy to
  // the device the model is on).
  const Device host = Device::cpu();
  model::MicroBatch mb;
  mb.tokens = Tensor::empty({batch, seq}, DType::I32, host);
  mb.labels = Tensor::empty({batch, seq}, DType::I32, host);
  mb.loss_mask = Tensor::empty({batch, seq}, DType::F32, host);
  if (o.reset_position_ids) mb.positions = Tensor::empty({batch, seq}, DType::I32, host);
  if (o.reset_attention_mask) mb.doc_start = Tensor::empty({batch, seq}, DType::I32, host);
  mb.sample_offset = first;
  std::vector<int32_t> sample(seq + 1);
  for (int64_t b = 0; b < batch; ++b) {
    data.get(first + b, sample);
    int32_t* tokens = mb.tokens.host_i32() + b * seq;
    int32_t* labels = mb.labels.host_i32() + b * seq;
    float* mask = mb.loss_mask.host_f32() + b * seq;
    int32_t position = 0, document_start = 0;
    for (int64_t j = 0; j < seq; ++j) {
      tokens[j] = sample[j];
      labels[j] = sample[j + 1];
      mask[j] = o.eod_mask_loss && sample[j] == o.eod ? 0.0f : 1.0f;
      if (o.reset_position_ids) mb.positions.host_i32()[b * seq + j] = position++;
      if (o.reset_attention_mask) mb.doc_start.host_i32()[b * seq + j] = document_start;
      if (sample[j] == o.eod) {  // the next token starts a document
        position = 0;
        document_start = static_cast<int32_t>(j + 1);
      }
    }
  }
  return mb;
}

MegatronSample gpt_megatron_sample(const model::MicroBatch& mb) {
  const int64_t seq = mb.tokens.shape()[1];
  MegatronSample s{{"tokens", {}}, {"labels", {}}, {"loss_mask", {}}, {"position_ids", {}}};
  for (int64_t j = 0; j < seq; ++j) {
    s[0].values.push_back(mb.tokens.host_i32()[j]);
    s[1].values.push_back(mb.labels.host_i32()[j]);
    s[2].values.push_back(static_cast<int64_t>(mb.loss_mask.host_f32()[j]));
    s[3].values.push_back(mb.positions.defined() ? mb.positions.host_i32()[j] : j);  // absent: 0, 1, ...
  }
  return s;
}

}  // namespace tessera::train
