// Megatron's state-dict keys for a GPT or a BERT, in each of the schemes its checkpoints use, mapped to Tessera's
// parameter names (which are Megatron-Core's local-spec names), and how each tensor is split over the
// tensor-parallel ranks. Kept apart from reading and merging (megatron_legacy.cc) so the mapping can be
// tested on its own.
#pragma once

#include <cstdint>
#include <string>

namespace tessera::ckpt {

// What a key of a chunk's state dict is.
struct MegatronKey {
  enum class Kind {
    Weight,       // a weight; `name` is Tessera's, with the chunk's local layer index
    TiedCopy,     // the last stage's copy of tied word embeddings (output_layer / word_embeddings_for_head)
    NotAWeight,   // Transformer Engine's _extra_state, rotary inv_freq buffers: nothing to convert
  };
  Kind kind = Kind::Weight;
  std::string name;
  int64_t layer = -1;  // the local layer index for decoder.layers.N.*, else -1
  std::string rest;    // for a layer: what follows "decoder.layers.N." in `name`
};

// `key` is flattened with dots ("language_model.encoder.layers.0.self_attention.query_key_value.weight"
// or "decoder.layers.0.self_attention.linear_qkv.layer_norm_weight"). Unknown keys come back as Weight
// under their own (normalised) name, for the caller to report as unused.
MegatronKey megatron_key(const std::string& key);

// The name megatron_key gives the tensor Tessera calls `tessera_name`: its layer stack is "decoder." (a
// BERT's Tessera names say "encoder."), the rest unchanged.
std::string megatron_stack_name(const std::string& tessera_name);

// Whether a checkpoint key (as saved, flattened with dots) is one only a BERT has: its masked-LM head,
// binary head, pooler or token-type embeddings, or Megatron-Core's "encoder.layers" (its GPT's are "decoder").
bool megatron_bert_key(const std::string& key);

// A mixture-of-experts key of expert-parallel rank `expert_rank`, whose file numbers its experts locally
// (Megatron-Core's SequentialMLP: "...mlp.experts.local_experts.L.linear_fc1.weight"; Transformer Engine's
// grouped GEMM: "...mlp.experts.linear_fc1.weightL"), in the per-expert form under the global number
// expert_rank * local_experts + L (Tessera's); `is_expert` tells whether it was one. Other keys come back
// unchanged.
std::string megatron_global_expert_key(const std::string& key, int64_t expert_rank, int64_t local_experts,
                                       bool* is_expert);

// How a Tessera tensor is split over tensor-parallel ranks in a Megatron checkpoint.
enum class MegatronSplit {
  Replicated,     // every rank holds it whole (norms, position embeddings, row-parallel biases)
  Rows,           // column-parallel: each rank holds a block of rows (QKV, fc1, vocabulary rows)
  GatedRows,      // SwiGLU's fc1: each rank holds [its rows of the gate; its rows of the up projection]
  Columns,        // row-parallel weights: each rank holds a block of columns (linear_proj, fc2)
};
MegatronSplit megatron_split(const std::string& tessera_name, bool swiglu);
const char* megatron_split_name(MegatronSplit s);  // "rows", "columns", ...

// Whether a weight Megatron keeps as a buffer, outside its optimizer (the router's expert_bias, moved by
// Megatron itself after each step): in the model state dict, never in an optimizer's numbering.
bool megatron_buffer_key(const std::string& key);

}  // namespace tessera::ckpt
