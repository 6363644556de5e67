// Hugging Face's mixture-of-experts families beyond Mixtral (issue 53): Qwen3MoeForCausalLM and
// DeepseekV3ForCausalLM. Their config.json fields into a Tessera configuration (hf_moe_config.cc), and
// their tensor names, layer by layer, to and from Tessera's (hf_moe.cc); hf_convert.cc drives both.
//
//   Qwen3MoeForCausalLM: Qwen3's attention (q_norm, k_norm) and, in layer i, Qwen3MoeSparseMoeBlock when
//     i is not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0, else a dense MLP of
//     intermediate_size. Its router is Mixtral's (softmax over all experts, top-k), renormalised when
//     norm_topk_prob (Tessera's default routing) or not (--moe-router-pre-softmax).
//   DeepseekV3ForCausalLM: Multi-Latent Attention (q_a_proj, q_a_layernorm, q_b_proj or q_proj;
//     kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj; o_proj) with YaRN rope_scaling; dense MLPs in the
//     first first_k_dense_replace layers, then DeepseekV3MoE: sigmoid scores, e_score_correction_bias
//     added for the selection only (Tessera's --moe-router-enable-expert-bias), group-limited top-k
//     (n_group, topk_group), the chosen scores renormalised and times routed_scaling_factor, plus
//     n_shared_experts experts as one shared MLP of n_shared_experts * moe_intermediate_size; its MTP
//     modules stored as the layers after the last (map_deepseek_mtp); FP8 weights (dequantize_fp8_weights).
//
// The MLA weights need no permutation: HF's rows are Megatron's ([kv latent | RoPE key], each head's
// [no-RoPE | RoPE] query and [no-RoPE key | value]), and the RoPE parts are stored interleaved in both
// (HF's rope_interleave, Tessera's MLA de-interleaves them before rotating, as Megatron does).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "core/tensor.h"
#include "model/config.h"

namespace tessera::ckpt {

// config.json's integer `key`, refusing a float, a bool or an out-of-range number (hf_config.cc).
int64_t hf_int_field(const nlohmann::json& hf, const char* key);

// The MoE part of a Qwen3MoeForCausalLM config.json into c, whose Llama/Qwen3 fields are read already.
void read_qwen3_moe_config(const nlohmann::json& hf, model::ModelConfig& c);
// A DeepseekV3ForCausalLM config.json into c, whose Llama-style fields (layers, hidden size, heads,
// intermediate_size, norms, rope_theta, vocabulary, tying) are read already. Refuses, by name, what
// Tessera cannot express.
// v2: DeepseekV2ForCausalLM, the same but for its router (softmax, not renormalised, routed_scaling_factor;
// greedy or group_limited_greedy top-k) and no correction bias or MTP layers.
void read_deepseek_config(const nlohmann::json& hf, model::ModelConfig& c, bool v2);

// What keeps an MLA model c from being a DeepseekV3ForCausalLM (v2: DeepseekV2ForCausalLM), or "" if
// nothing; its config.json fields, made from Llama's `llama`.
std::string not_deepseek(const model::ModelConfig& c, bool v2);
nlohmann::json deepseek_config(const model::ModelConfig& c, nlohmann::json llama, bool v2);
// What keeps c from being a Qwen3MoeForCausalLM, or "" if nothing.
std::string not_qwen3_moe(const model::ModelConfig& c);
// The Qwen3MoeForCausalLM fields of c's config.json, added to Qwen3's `qwen3`.
nlohmann::json qwen3_moe_config(const model::ModelConfig& c, nlohmann::json qwen3);

// One direction of map_tensors (hf_convert.cc): the source side's tensors, the other side's being made,
// and which source tensors were used (every one must be).
struct HfTensorMapper {
  const std::map<std::string, Tensor>& src;
  std::map<std::string, Tensor>& out;
  std::set<std::string>& used;
  bool to_hf;

  const Tensor& get(const std::string& name);
  void rename(const std::string& tessera, const std::string& hf);
  // SwiGLU's fc1 [gate; up] <-> gate_proj and up_proj (width rows each).
  void swiglu_fc1(const std::string& fc1, const std::string& gate, const std::string& up, int64_t width);
  // A bias-free SwiGLU MLP: linear_fc1/linear_fc2 under `tessera`, gate/up/down_proj under `hf`.
  void swiglu_mlp(const std::string& tessera, const std::string& hf, int64_t width);
};

// Layer i's feed-forward block of a Qwen3MoE or DeepSeek-V3 model: a dense MLP, or the router
// (mlp.gate.weight, DeepSeek's mlp.gate.e_score_correction_bias), the experts (mlp.experts.E.*_proj) and
// DeepSeek's shared experts (mlp.shared_experts.*_proj). t, h: the layer's Tessera and HF prefixes;
// layer_number: Tessera's 1-based number (an MTP module's layer is num_layers + k).
void map_moe_family_mlp(const model::ModelConfig& c, int64_t layer_number, const std::string& t,
                        const std::string& h, HfTensorMapper& m);
// Layer's Multi-Latent Attention (without the input norm).
void map_mla_attention(const model::ModelConfig& c, const std::string& t, const std::string& h, HfTensorMapper& m);
// DeepSeek-V3's MTP modules, stored as layers num_hidden_layers + k: enorm, hnorm, eh_proj,
// shared_head.norm (the module's final_layernorm) and a decoder layer, with copies of the word embedding
// (embed_tokens) and output layer (shared_head.head), written on export and checked equal on import.
void map_deepseek_mtp(const model::ModelConfig& c, HfTensorMapper& m);

// DeepSeek-V3's FP8 checkpoints: each F8_E4M3 weight X.weight of `fp8` (decoded to fp32) times its
// X.weight_scale_inv, one fp32 scale a block of quantization_config's weight_block_size ([128, 128] when
// absent), moved into `tensors` and its scale removed from them (hf_fp8.cc).
void dequantize_fp8_weights(const nlohmann::json& config, std::map<std::string, Tensor>& fp8,
                            std::map<std::string, Tensor>& tensors);

}  // namespace tessera::ckpt
