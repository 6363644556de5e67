// The tensor names of Qwen3MoeForCausalLM's and DeepseekV3ForCausalLM's feed-forward blocks and of
// DeepSeek's Multi-Latent Attention, to and from Tessera's (hf_moe.h). Every mapping is a rename or the
// split of SwiGLU's fc1, so a round trip is bit-exact.
#include "ckpt/hf_moe.h"

#include <algorithm>
#include <utility>

#include "ckpt/hf_layout.h"
#include "core/check.h"

namespace tessera::ckpt {

const Tensor& HfTensorMapper::get(const std::string& name) {
  used.insert(name);
  auto it = src.find(name);
  TESSERA_CHECK(it != src.end(), "convert: the ", to_hf ? "checkpoint" : "Hugging Face model", " has no tensor ", name);
  return it->second;
}

void HfTensorMapper::rename(const std::string& tessera, const std::string& hf) {
  if (to_hf) out[hf] = get(tessera);
  else out[tessera] = get(hf);
}

void HfTensorMapper::swiglu_fc1(const std::string& fc1, const std::string& gate, const std::string& up, int64_t width) {
  if (to_hf) {
    out[gate] = hf_layout::rows(get(fc1), 0, width);
    out[up] = hf_layout::rows(get(fc1), width, width);
  } else {
    out[fc1] = hf_layout::concat_rows({get(gate), get(up)});
  }
}

void HfTensorMapper::swiglu_mlp(const std::string& tessera, const std::string& hf, int64_t width) {
  swiglu_fc1(tessera + "linear_fc1.weight", hf + "gate_proj.weight", hf + "up_proj.weight", width);
  rename(tessera + "linear_fc2.weight", hf + "down_proj.weight");
}

void map_moe_family_mlp(const model::ModelConfig& c, int64_t layer_number, const std::string& t, const std::string& h,
                        HfTensorMapper& m) {
  const int64_t experts = c.moe.experts(layer_number);
  if (experts == 0) {  // a dense layer: Llama's MLP of intermediate_size
    m.swiglu_mlp(t + "mlp.", h + "mlp.", c.ffn_hidden_size);
    return;
  }
  m.rename(t + "mlp.router.weight", h + "mlp.gate.weight");
  // DeepSeek-V3's correction bias is the aux-loss-free balancing bias: added for the selection only.
  if (c.moe.expert_bias) m.rename(t + "mlp.router.expert_bias", h + "mlp.gate.e_score_correction_bias");
  for (int64_t e = 0; e < experts; ++e)
    m.swiglu_mlp(str_cat(t, "mlp.experts.local_experts.", e, "."), str_cat(h, "mlp.experts.", e, "."),
                 c.moe.ffn_hidden_size);
  if (c.moe.shared_expert_intermediate_size > 0)
    m.swiglu_mlp(t + "mlp.shared_experts.", h + "mlp.shared_experts.", c.moe.shared_expert_intermediate_size);
}

void map_mla_attention(const model::ModelConfig& c, const std::string& t, const std::string& h, HfTensorMapper& m) {
  const std::string ta = t + "self_attention.", ha = h + "self_attn.";
  if (c.mla.q_lora_rank > 0) {
    m.rename(ta + "linear_q_down_proj.weight", ha + "q_a_proj.weight");
    m.rename(ta + "q_layernorm.weight", ha + "q_a_layernorm.weight");
    m.rename(ta + "linear_q_up_proj.weight", ha + "q_b_proj.weight");
  } else {
    m.rename(ta + "linear_q_proj.weight", ha + "q_proj.weight");
  }
  m.rename(ta + "linear_kv_down_proj.weight", ha + "kv_a_proj_with_mqa.weight");
  m.rename(ta + "kv_layernorm.weight", ha + "kv_a_layernorm.weight");
  m.rename(ta + "linear_kv_up_proj.weight", ha + "kv_b_proj.weight");
  m.rename(ta + "linear_proj.weight", ha + "o_proj.weight");
}

void map_deepseek_mtp(const model::ModelConfig& c, HfTensorMapper& m) {
  for (int64_t k = 0; k < c.mtp_num_layers; ++k) {
    const std::string t = str_cat("mtp.layers.", k, "."), h = str_cat("model.layers.", c.num_layers + k, ".");
    m.rename(t + "enorm.weight", h + "enorm.weight");
    m.rename(t + "hnorm.weight", h + "hnorm.weight");
    m.rename(t + "eh_proj.weight", h + "eh_proj.weight");  // [h, 2h]: [embedding | hidden], as Megatron's
    m.rename(t + "final_layernorm.weight", h + "shared_head.norm.weight");
    const std::string tl = t + "transformer_layer.";
    m.rename(tl + "input_layernorm.weight", h + "input_layernorm.weight");
    m.rename(tl + "pre_mlp_layernorm.weight", h + "post_attention_layernorm.weight");
    map_mla_attention(c, tl, h, m);
    map_moe_family_mlp(c, c.num_layers + k + 1, tl, h, m);
    // The module shares the model's embedding and output layer; DeepSeek's files hold copies of both.
    const std::pair<std::string, std::string> shared[] = {
        {"embedding.word_embeddings.weight", h + "embed_tokens.weight"},
        {c.untie_embeddings_and_output_weights ? "output_layer.weight" : "embedding.word_embeddings.weight",
         h + "shared_head.head.weight"}};
    for (const auto& [tessera, hf] : shared) {
      if (m.to_hf) {
        m.out[hf] = m.get(tessera);
        continue;
      }
      const std::string main = tessera == "output_layer.weight" ? "lm_head.weight" : "model.embed_tokens.weight";
      const Tensor& copy = m.get(hf);
      const Tensor& original = m.get(main);
      TESSERA_CHECK(copy.shape() == original.shape() &&
                        std::equal(copy.host_f32(), copy.host_f32() + copy.numel(), original.host_f32()),
                    "convert: ", hf, " differs from ", main, "; Tessera's MTP module shares the model's");
    }
  }
}

}  // namespace tessera::ckpt
