// `tessera convert`: Tessera checkpoints to and from Hugging Face model directories.
//
//   GPT-2 style (learned positions, LayerNorm, GELU, tied output)  <->  GPT2LMHeadModel
//   Llama style (rope, RMSNorm, SwiGLU, grouped-query attention)   <->  LlamaForCausalLM
//   Llama style, every layer MoE with the same experts, no biases  <->  MixtralForCausalLM
//   Llama style with --qk-layernorm (and MoE)                      <->  Qwen3ForCausalLM (Qwen3MoeForCausalLM)
//   Multi-latent attention, sigmoid-routed MoE (hf_moe.h)          <->  DeepseekV3ForCausalLM
//   BERT, post-LN / pre-LN (the bert family; hf_bert.h)           <->  BertForPreTraining /
//                                                                      MegatronBertForPreTraining
//
// A Hugging Face directory holds config.json and either model.safetensors or, above the shard size,
// model-0000i-of-0000n.safetensors with model.safetensors.index.json (its "weight_map"), as
// save_pretrained writes them. Tensors are fp32 on export; fp32, bf16 or (DeepSeek-V3's) block-scaled FP8 on import.
//
// The layouts differ in three ways, all exact permutations, so Tessera -> HF -> Tessera is bit-exact:
//  * Megatron's fused QKV weight holds, for each query group, its query heads, then its key head and
//    value head; HF has separate q/k/v projections (Llama) or one [Q | K | V] projection (GPT-2).
//  * GPT-2's Conv1D weights are stored [in, out], the transpose of Tessera's [out, in].
//  * SwiGLU's fc1 is [gate; up] in Tessera, gate_proj and up_proj in Llama, w1 and w3 in each Mixtral
//    expert (w2 is fc2; block_sparse_moe.gate is the router), as Megatron's loader_mixtral_hf.py maps them.
//    Mixtral routes softmax -> top-k -> renormalise, which is Tessera's default routing (a softmax over
//    the k chosen logits); a model Mixtral cannot express (dense layers, a pyramid, shared or residual
//    experts, other routing, token dropping, biases) is refused, naming why.
// Rotary embeddings need no permutation: Tessera's RoPE is Megatron's rotate-half form (dimension i
// paired with i + head_dim/2), which is exactly HF Llama's rotate_half. (The permutation in HF's
// convert_llama_weights_to_hf.py turns Meta's interleaved-pair checkpoints into that form; it does not
// apply to Megatron-style weights.)
//
// The vocabulary keeps Tessera's padding (config.json "vocab_size" is the padded size; the padded rows
// are part of the softmax in both), and config.json carries the Tessera run's arguments under
// "tessera_args" so that the reverse conversion restores them exactly.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/tensor.h"
#include "model/config.h"

namespace tessera::ckpt {

// Writes the latest checkpoint of `load_dir` as a Hugging Face model directory `out_dir`. Shards the
// weights into files of at most max_shard_bytes (one file, model.safetensors, if they fit).
void export_hugging_face(const std::string& load_dir, const std::string& out_dir, int64_t max_shard_bytes);

// Reads the Hugging Face model directory `hf_dir` and saves it as a Tessera checkpoint (iteration 0, no
// optimizer state) in `save_dir`.
void import_hugging_face(const std::string& hf_dir, const std::string& save_dir);

// Whole tensors of a Tessera model (or their gradients, which map the same way) under their Hugging
// Face names and layouts. Throws if the model has no Hugging Face equivalent.
std::map<std::string, Tensor> to_hugging_face_layout(const model::ModelConfig& config,
                                                      const std::map<std::string, Tensor>& tessera);

}  // namespace tessera::ckpt
