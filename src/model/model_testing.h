// Helpers for the model tests: a random micro-batch and the forward context they run under.
#pragma once

#include "core/philox.h"
#include "model/language_model.h"

namespace tessera::model::testing {

// A tiny GPT of `layers` layers over `seq` tokens: GPT-2 style (learned positions, LayerNorm, GELU,
// biases, tied) or Llama style (RoPE, RMSNorm, SwiGLU, grouped-query attention: 4 heads in 2 groups,
// untied), dropout on, initialised large enough that every path carries gradient.
inline ModelConfig tiny_gpt_config(bool llama_style, int64_t layers, int64_t seq, int64_t max_positions) {
  ModelConfig c;
  c.num_layers = layers;
  c.hidden_size = 16;
  c.num_attention_heads = 4;
  c.num_query_groups = llama_style ? 2 : 4;
  c.kv_channels = 4;
  c.ffn_hidden_size = llama_style ? 24 : 64;
  c.seq_length = seq;
  c.max_position_embeddings = max_positions;
  c.vocab_size = 13;
  c.padded_vocab_size = 16;
  c.position_embedding = llama_style ? PositionEmbedding::Rope : PositionEmbedding::LearnedAbsolute;
  c.normalization = llama_style ? Normalization::RMSNorm : Normalization::LayerNorm;
  c.swiglu = llama_style;
  c.untie_embeddings_and_output_weights = llama_style;
  c.add_bias_linear = !llama_style;
  c.hidden_dropout = 0.1f;
  c.attention_dropout = 0.1f;
  c.init_method_std = 0.2f;
  return c;
}

// batch samples of random tokens and labels, every fifth position left out of the loss.
inline MicroBatch random_batch(const ModelConfig& c, int64_t batch, uint64_t seed) {
  MicroBatch mb;
  // On the host (whatever the default device), since it is written here.
  mb.tokens = Tensor::empty({batch, c.seq_length}, DType::I32, Device::cpu());
  mb.labels = Tensor::empty({batch, c.seq_length}, DType::I32, Device::cpu());
  mb.loss_mask = Tensor::empty({batch, c.seq_length}, DType::F32, Device::cpu());
  PhiloxStream s(seed, 1);
  for (int64_t i = 0; i < mb.tokens.numel(); ++i) {
    mb.tokens.i32()[i] = static_cast<int32_t>(s.bits(2 * i) % c.vocab_size);
    mb.labels.i32()[i] = static_cast<int32_t>(s.bits(2 * i + 1) % c.vocab_size);
    mb.loss_mask.f32()[i] = (i % 5 == 3) ? 0.0f : 1.0f;  // some masked tokens
  }
  return mb;
}

// Dropout keyed at iteration 3 of seed 7, from sample 10.
inline ForwardContext context(const ModelConfig& c, int64_t batch, bool training) {
  ForwardContext ctx;
  ctx.seed = 7;
  ctx.iteration = 3;
  ctx.sample_offset = 10;
  ctx.training = training;
  ctx.seq = c.seq_length;
  ctx.batch = batch;
  return ctx;
}

}  // namespace tessera::model::testing
