// Helpers for the BERT tests (model/bert_model_test.cc on the CPU, model/cuda/cuda_bert_model_test.cc on a
// GPU against the CPU): a tiny BERT and a padded micro-batch of it, written on the host.
#pragma once

#include <vector>

#include "core/philox.h"
#include "model/config.h"
#include "model/language_model.h"

namespace tessera::model::testing {

// Two layers of 16 channels over `seq` tokens, pre-LN or post-LN (--apply-residual-connection-post-layernorm),
// with or without the binary head (and so token types), dropout on, initialised large enough that every
// path carries gradient.
inline ModelConfig tiny_bert_config(bool post_ln, bool binary_head, int64_t seq = 7) {
  ModelConfig c;
  c.family = "bert";
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_attention_heads = 4;
  c.num_query_groups = 4;
  c.kv_channels = 4;
  c.ffn_hidden_size = 32;
  c.seq_length = seq;
  c.max_position_embeddings = seq + 1;
  c.vocab_size = 13;
  c.padded_vocab_size = 16;
  c.num_tokentypes = binary_head ? 2 : 0;
  c.bert_binary_head = binary_head;
  c.apply_residual_connection_post_layernorm = post_ln;
  c.hidden_dropout = 0.1f;
  c.attention_dropout = 0.1f;
  c.init_method_std = 0.2f;
  return c;
}

// Sample b holds lengths[b] tokens, then padding; every third token is a masked prediction; the second
// half of each sample is segment B; odd samples are swapped. On the host, whatever the default device.
inline MicroBatch bert_batch(const ModelConfig& c, const std::vector<int64_t>& lengths, uint64_t seed) {
  const int64_t batch = static_cast<int64_t>(lengths.size()), seq = c.seq_length;
  const Device host = Device::cpu();
  MicroBatch mb;
  mb.tokens = Tensor::zeros({batch, seq}, DType::I32, host);
  mb.labels = Tensor::zeros({batch, seq}, DType::I32, host);
  mb.loss_mask = Tensor::zeros({batch, seq}, DType::F32, host);
  mb.padding_mask = Tensor::zeros({batch, seq}, DType::I32, host);
  if (c.bert_binary_head) {
    mb.token_types = Tensor::zeros({batch, seq}, DType::I32, host);
    mb.sentence_order = Tensor::zeros({batch}, DType::I32, host);
  }
  PhiloxStream s(seed, 1);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t j = 0; j < lengths[b]; ++j) {
      const int64_t i = b * seq + j;
      mb.tokens.i32()[i] = static_cast<int32_t>(s.bits(3 * i) % c.vocab_size);
      mb.padding_mask.i32()[i] = 1;
      if (j % 3 == 1) {
        mb.labels.i32()[i] = static_cast<int32_t>(s.bits(3 * i + 1) % c.vocab_size);
        mb.loss_mask.f32()[i] = 1.0f;
      }
      if (c.bert_binary_head) mb.token_types.i32()[i] = j >= lengths[b] / 2 ? 1 : 0;
    }
    if (c.bert_binary_head) mb.sentence_order.i32()[b] = static_cast<int32_t>(b % 2);
  }
  return mb;
}

}  // namespace tessera::model::testing
