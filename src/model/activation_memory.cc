#include "model/activation_memory.h"

#include <algorithm>

#include "kernels/moe_routing.h"

namespace tessera::model {
namespace {

double tokens(const ActivationLayout& l) { return static_cast<double>(l.seq * l.micro_batch); }
// The tokens a layer's feed-forward slot sees on one rank: its sequence shard under sequence parallelism.
double slot_tokens(const ActivationLayout& l) {
  return tokens(l) / (l.sequence_parallel ? static_cast<double>(l.tensor_parallel) : 1.0);
}
double fc1_columns(const ModelConfig& c, double f) { return c.swiglu ? 2.0 * f : f; }
// A tensor-parallel MLP of width f over the gathered s b rows: its fc1 output and activation.
double tp_mlp_record_bytes(const ModelConfig& c, const ActivationLayout& l, double f, double e) {
  return tokens(l) * (fc1_columns(c, f) + f) * e / static_cast<double>(l.tensor_parallel);
}
// A deferred MLP's W pass over `rows` rows split `split` ways: fc1's input and output gradient, fc2's
// output gradient and input, fp32.
double mlp_weight_gradient_bytes(const ModelConfig& c, double rows, double f, double split) {
  const double h = static_cast<double>(c.hidden_size);
  return rows * (2.0 * h + (fc1_columns(c, f) + f) / split) * 4.0;
}
// The rows each local expert's MLP runs on, on one rank (balanced routing; see moe_record_bytes).
double expert_rows(const ModelConfig& c, const ActivationLayout& l, int64_t layer_number) {
  return static_cast<double>(l.expert_tensor_parallel) * moe_routed_rows(c, l, layer_number);
}

}  // namespace

// Multi-Latent Attention's record per token (model/multi_latent_attention.cc): the latents (and their
// normed copies and statistics under --qk-layernorm) on the rank's rows, and the heads' q, k, v and output
// of width max(q_head_dim, v_head_dim), the values' columns of the output when narrower, and the
// log-sum-exp. e: the bytes of an activation.
double mla_attention_record_bytes(const ModelConfig& c, const ActivationLayout& l, double e) {
  const MlaConfig& m = c.mla;
  const double t = static_cast<double>(l.tensor_parallel), a = static_cast<double>(c.num_attention_heads);
  const double width = static_cast<double>(std::max(m.q_head_dim(), m.v_head_dim));
  const double latents = static_cast<double>(m.kv_lora_rank + m.q_lora_rank);
  const double norms = c.qk_layernorm ? 1.0 : 0.0, norm_rows = (m.q_lora_rank > 0 ? 2.0 : 1.0) * norms;
  const double stats = c.normalization == Normalization::LayerNorm ? 2.0 : 1.0;
  const double latent_bytes = (latents * (1.0 + norms) * e + norm_rows * stats * 4.0) / (l.sequence_parallel ? t : 1.0);
  const double values = m.v_head_dim == static_cast<int64_t>(width) ? 0.0 : static_cast<double>(m.v_head_dim);
  return latent_bytes + (a * (4.0 * width + values) * e + a * 4.0) / t;
}

double korthikanti_layer_bytes(const ModelConfig& c, const ActivationLayout& l) {
  const double sbh = tokens(l) * static_cast<double>(c.hidden_size), t = static_cast<double>(l.tensor_parallel);
  const double attention = l.selective_recompute ? 0.0
                                                 : 5.0 * static_cast<double>(c.num_attention_heads * l.seq) /
                                                       static_cast<double>(c.hidden_size);
  if (l.sequence_parallel) return sbh * (34.0 + attention) / t;
  return sbh * (10.0 + 24.0 / t + attention / t);
}

double korthikanti_full_recompute_layer_bytes(const ModelConfig& c, const ActivationLayout& l) {
  return 2.0 * tokens(l) * static_cast<double>(c.hidden_size) /
         (l.sequence_parallel ? static_cast<double>(l.tensor_parallel) : 1.0);
}

double layer_input_bytes(const ModelConfig& c, const ActivationLayout& l) {
  return 4.0 * tokens(l) * static_cast<double>(c.hidden_size) /
         (l.sequence_parallel ? static_cast<double>(l.tensor_parallel) : 1.0);
}

double moe_routed_rows(const ModelConfig& c, const ActivationLayout& l, int64_t layer_number) {
  const MoeConfig& m = c.moe;
  const int64_t experts = m.experts(layer_number);
  if (experts == 0) return 0;
  const int64_t T = static_cast<int64_t>(slot_tokens(l)), k = m.router.topk;
  if (m.dropless()) return static_cast<double>(T * k);
  const int64_t capacity = kernels::expert_capacity(T, k, experts, m.capacity_factor);
  if (m.pad_expert_input_to_capacity) return static_cast<double>(experts * std::min(capacity, T));
  return static_cast<double>(std::min(T * k, experts * capacity));
}

double moe_record_bytes(const ModelConfig& c, const ActivationLayout& l, int64_t layer_number) {
  const MoeConfig& m = c.moe;
  const double E = static_cast<double>(m.experts(layer_number));
  if (E == 0) return 0;
  const double e = static_cast<double>(dtype_size(c.params_dtype)), h = static_cast<double>(c.hidden_size);
  const double T = slot_tokens(l), k = static_cast<double>(m.router.topk), R = moe_routed_rows(c, l, layer_number);
  const double f = static_cast<double>(m.ffn_hidden_size), etp = static_cast<double>(l.expert_tensor_parallel);
  // The router: logits, indices and probabilities; the load-balancing counts (per sequence under
  // seq_aux_loss); the jittered input.
  double bytes = T * E * 4.0 + T * k * 8.0;
  if (m.load_balancing != LoadBalancing::None)
    bytes += (m.load_balancing == LoadBalancing::SeqAuxLoss ? static_cast<double>(l.micro_batch) : 1.0) * E * 4.0;
  if (m.input_jitter_eps > 0) bytes += T * h * e;
  bytes += R * 12.0;                                             // each row's token, slot and probability
  const double rows = expert_rows(c, l, layer_number);           // balanced: grouped padding adds nothing
  bytes += rows * h * e + R * h * e;                             // experts' input rows, outputs back here
  bytes += rows * (fc1_columns(c, f) + f) / etp * e;             // each expert's fc1 output and activation
  if (m.shared_expert_intermediate_size > 0)
    bytes += tp_mlp_record_bytes(c, l, static_cast<double>(m.shared_expert_intermediate_size), e);
  if (m.residual)
    bytes += tp_mlp_record_bytes(c, l, static_cast<double>(c.ffn_hidden_size), e) + T * (2.0 * h * e + 2.0 * 4.0);
  return bytes;
}

double layer_record_bytes(const ModelConfig& c, const ActivationLayout& l, int64_t layer_number) {
  if (c.moe.experts(layer_number) == 0) return layer_record_bytes(c, l);
  return layer_record_bytes(c, l) - tp_mlp_record_bytes(c, l, static_cast<double>(c.ffn_hidden_size),
                                                        static_cast<double>(dtype_size(c.params_dtype))) +
         moe_record_bytes(c, l, layer_number);
}

// Multi-Latent Attention's deferred GEMMs (model/multi_latent_attention.cc): linear_proj (the values'
// columns of the output), the up projections over the gathered rows (split by heads), and the down
// projections, replicated, over the rank's own rows (each holding the layer's input).
double mla_weight_gradient_bytes(const ModelConfig& c, const ActivationLayout& l) {
  const MlaConfig& m = c.mla;
  const double rows = tokens(l), local = slot_tokens(l), h = static_cast<double>(c.hidden_size);
  const double heads = static_cast<double>(c.num_attention_heads) / static_cast<double>(l.tensor_parallel);
  const double kv = static_cast<double>(m.kv_lora_rank), q = static_cast<double>(m.q_lora_rank);
  const double q_columns = heads * static_cast<double>(m.q_head_dim());
  double elements = rows * (h + heads * static_cast<double>(m.v_head_dim)) +                  // linear_proj
                    rows * (kv + heads * static_cast<double>(m.qk_head_dim + m.v_head_dim)) +  // kv up
                    local * (h + kv + static_cast<double>(m.qk_pos_emb_head_dim));              // kv down
  elements += m.q_lora_rank > 0 ? rows * (q + q_columns) + local * (h + q)  // q up, q down
                                : rows * (h + q_columns);                   // q
  return elements * 4.0;
}

double layer_weight_gradient_bytes(const ModelConfig& c, const ActivationLayout& l, int64_t layer_number) {
  const double rows = tokens(l), t = static_cast<double>(l.tensor_parallel), h = static_cast<double>(c.hidden_size);
  const double heads = static_cast<double>(c.num_attention_heads * c.kv_channels);
  // QKV: its input and its output's gradient; linear_proj: its output's gradient and its input.
  double bytes = c.mla.enabled ? mla_weight_gradient_bytes(c, l)
                               : rows * (2.0 * h + (static_cast<double>(c.qkv_size()) + heads) / t) * 4.0;
  const MoeConfig& m = c.moe;
  if (m.experts(layer_number) == 0)
    return bytes + mlp_weight_gradient_bytes(c, rows, static_cast<double>(c.ffn_hidden_size), t);
  bytes += mlp_weight_gradient_bytes(c, expert_rows(c, l, layer_number), static_cast<double>(m.ffn_hidden_size),
                                     static_cast<double>(l.expert_tensor_parallel));
  if (m.shared_expert_intermediate_size > 0)
    bytes += mlp_weight_gradient_bytes(c, rows, static_cast<double>(m.shared_expert_intermediate_size), t);
  if (m.residual) bytes += mlp_weight_gradient_bytes(c, rows, static_cast<double>(c.ffn_hidden_size), t);
  return bytes;
}

double head_weight_gradient_bytes(const ModelConfig& c, const ActivationLayout& l) {
  const double t = static_cast<double>(l.tensor_parallel);
  return tokens(l) * (static_cast<double>(c.padded_vocab_size) / t + static_cast<double>(c.hidden_size)) * 4.0;
}

double layer_record_bytes(const ModelConfig& c, const ActivationLayout& l) {
  const double t = static_cast<double>(l.tensor_parallel), d = static_cast<double>(c.kv_channels);
  const double a = static_cast<double>(c.num_attention_heads), g = static_cast<double>(c.num_query_groups);
  const double f = static_cast<double>(c.ffn_hidden_size);
  // Per token: the norms' inputs and outputs plus their statistics (mean and 1/std, or 1/std for RMSNorm).
  const double norm_stats = c.normalization == Normalization::LayerNorm ? 4.0 : 2.0;
  // Activations take e bytes (2 when kept in 16 bits under mixed precision), statistics 4.
  const double e = static_cast<double>(dtype_size(c.params_dtype));
  const double norms =
      (4.0 * static_cast<double>(c.hidden_size) * e + norm_stats * 4.0) / (l.sequence_parallel ? t : 1.0);
  double attention = ((2.0 * a + 2.0 * g) * d * e + a * 4.0) / t;  // q, k, v, output; log-sum-exp
  // --qk-layernorm: the norms' inputs (each head's query and key) and a statistics row per head.
  if (c.qk_layernorm) attention += ((a + g) * d * e + (a + g) * norm_stats / 2.0 * 4.0) / t;
  if (c.mla.enabled) attention = mla_attention_record_bytes(c, l, e);
  const double mlp = ((c.swiglu ? 2.0 : 1.0) * f + f) * e / t;            // fc1 output, activation
  return tokens(l) * (norms + attention + mlp);
}

double chunk_extra_bytes(const ModelConfig& c, const ActivationLayout& l, bool first_chunk, bool last_chunk) {
  const double rows = tokens(l), t = static_cast<double>(l.tensor_parallel), h = static_cast<double>(c.hidden_size);
  double bytes = 4.0 * rows;                  // positions
  if (first_chunk || (last_chunk && c.mtp_num_layers > 0)) bytes += 4.0 * rows;  // tokens
  if (!last_chunk) return bytes;
  const double norm_rows = l.sequence_parallel ? rows / t : rows;
  const double norm_stats = c.normalization == Normalization::LayerNorm ? 2.0 : 1.0;
  bytes += norm_rows * (2.0 * h + norm_stats) * 4.0;                              // final norm
  bytes += rows * (4.0 + 4.0);                                                    // labels, loss mask
  bytes += rows * (static_cast<double>(c.padded_vocab_size) / t + 1.0) * 4.0;     // logits shard, lse
  return bytes;
}

double mtp_module_extra_bytes(const ModelConfig& c, const ActivationLayout& l) {
  const double rows = tokens(l), t = static_cast<double>(l.tensor_parallel), h = static_cast<double>(c.hidden_size);
  const double norm_rows = l.sequence_parallel ? rows / t : rows;
  const double norm_stats = c.normalization == Normalization::LayerNorm ? 2.0 : 1.0;
  return norm_rows * (7.0 * h + 3.0 * norm_stats) * 4.0 +                     // the fp32 glue, 3 norms' stats
         rows * 4.0 * 4.0 +                                                    // tokens, positions, labels, mask
         rows * (static_cast<double>(c.padded_vocab_size) / t + 1.0) * 4.0;  // logits shard, lse
}

double mtp_record_bytes(const ModelConfig& c, const ActivationLayout& l) {
  double bytes = 0;  // each module's layer is layer num_layers + i + 1, MoE where the last layer is
  for (int64_t i = 0; i < c.mtp_num_layers; ++i)
    bytes += layer_record_bytes(c, l, c.num_layers + i + 1) + mtp_module_extra_bytes(c, l);
  return bytes;
}

double mtp_weight_gradient_bytes(const ModelConfig& c, const ActivationLayout& l) {
  const double h = static_cast<double>(c.hidden_size), t = static_cast<double>(l.tensor_parallel);
  double bytes = 0;  // per module: its layer's, its output layer's and eh_proj's (input [2h], gathered)
  for (int64_t i = 0; i < c.mtp_num_layers; ++i)
    bytes += layer_weight_gradient_bytes(c, l, c.num_layers + i + 1) + head_weight_gradient_bytes(c, l) +
             tokens(l) * (2.0 * h + h / t) * 4.0;
  return bytes;
}

double sliced_mtp_gradient_bytes(const ModelConfig& c, const ActivationLayout& l) {
  if (c.mtp_num_layers == 0) return 0;
  const double rows = tokens(l), t = static_cast<double>(l.tensor_parallel);
  return (l.sequence_parallel ? rows / t : rows) * static_cast<double>(c.hidden_size) * 4.0;
}

double sliced_mtp_sequence_bytes(const ModelConfig& c, const ActivationLayout& l) {
  if (c.mtp_num_layers == 0) return 0;
  return mtp_record_bytes(c, l) + sliced_mtp_gradient_bytes(c, l) + 4.0 * tokens(l);
}

double chunk_record_bytes(const ModelConfig& c, const ActivationLayout& l, int64_t layers, const Recompute& r) {
  ModelConfig dense = c;
  dense.moe.layer_experts.clear();
  return chunk_record_bytes(dense, l, 1, layers, r);
}

double chunk_record_bytes(const ModelConfig& c, const ActivationLayout& l, int64_t first_layer, int64_t layers,
                          const Recompute& r) {
  const double input = layer_input_bytes(c, l);
  // Layers kept whole: none under uniform (one input per group of num_layers), all but the first
  // num_layers under block.
  int64_t recomputed = 0;
  double bytes = 0;
  if (r.method == RecomputeMethod::Uniform) return static_cast<double>((layers + r.num_layers - 1) / r.num_layers) * input;
  if (r.method == RecomputeMethod::Block) recomputed = std::min(layers, r.num_layers);
  bytes += static_cast<double>(recomputed) * input;
  for (int64_t i = recomputed; i < layers; ++i) bytes += layer_record_bytes(c, l, first_layer + i);
  return bytes;
}

}  // namespace tessera::model
