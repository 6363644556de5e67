// The small Llama-style model (4 layers, hidden 256, 8 heads, seq 128, vocabulary 1024, RMSNorm) that the
// planner's pricing tests start from; each test sets the feature it prices on top.
#pragma once

#include "model/config.h"

namespace tessera::plan {

inline model::ModelConfig toy_model() {
  model::ModelConfig c;
  c.num_layers = 4;
  c.hidden_size = 256;
  c.num_attention_heads = c.num_query_groups = 8;
  c.kv_channels = 32;
  c.ffn_hidden_size = 1024;
  c.seq_length = c.max_position_embeddings = 128;
  c.vocab_size = c.padded_vocab_size = 1024;
  c.normalization = model::Normalization::RMSNorm;
  return c;
}

}  // namespace tessera::plan
