#include "plan/memory_model.h"

#include <algorithm>

#include "kernels/moe_routing.h"
#include "model/activation_memory.h"
#include "pipeline/schedules.h"

namespace tessera::plan {
namespace {

// An MLP of width f split over t ranks: fc1 by columns, fc2 by rows (its bias replicated).
double mlp_parameters(const model::ModelConfig& c, double f, double t) {
  const double h = c.hidden_size, bias = c.add_bias_linear ? 1 : 0;
  return fc1_width(c, f) * (h + bias) / t + h * f / t + bias * h;
}

// The fc1 output and activation that a tp-split MLP of width f keeps for one micro-batch.
double mlp_activation_bytes(const model::ModelConfig& c, const Layout& l, double f) {
  return l.sequence_per_rank(c.seq_length) * l.micro_batch_size * (fc1_width(c, f) + f) * l.activation_bytes() / l.tp;
}

// What an MoE layer's feed-forward slot keeps for backward for one micro-batch, an estimate: routing is
// taken as balanced, so each rank receives as many rows as it sends (R = routed_rows). Per rank, with
// T = s*b/tp tokens, E experts, top-k, expert width f and etp:
//   the router's fp32 logits [T, E], top-k probabilities and indices [T, k] (4 bytes each), the jittered
//   input [T, h] when jittered, and each routed row's token, slot and probability (4 bytes each);
//   the experts' input rows after the all-to-all and the etp all-gather, etp * R rows of h, and their
//   combined outputs back on this rank, R rows of h (kept for the probabilities' gradient);
//   each local expert's fc1 output and activation for its rows: etp * R rows of (fc1 + f) / etp;
//   the shared expert and the residual MLP as tp-split MLPs, and the residual form's two outputs [T, h]
//   and its fp32 coefficient logits [T, 2].
double moe_activation_bytes(const model::ModelConfig& c, const Layout& l, int64_t layer) {
  const model::MoeConfig& m = c.moe;
  const double e = l.activation_bytes(), h = c.hidden_size, k = static_cast<double>(m.router.topk);
  const double tokens = l.sequence_per_rank(c.seq_length) * l.micro_batch_size / (l.sequence_parallel ? l.tp : 1);
  const double rows = routed_rows(c, l, layer), f = static_cast<double>(m.ffn_hidden_size);
  double bytes = tokens * static_cast<double>(m.experts(layer)) * 4 + tokens * k * 8 + rows * 12;
  if (m.input_jitter_eps > 0) bytes += tokens * h * e;
  bytes += (l.expert_tp() + 1) * rows * h * e + rows * (fc1_width(c, f) + f) * e;
  if (m.shared_expert_intermediate_size > 0)
    bytes += mlp_activation_bytes(c, l, static_cast<double>(m.shared_expert_intermediate_size));
  if (m.residual)
    bytes += mlp_activation_bytes(c, l, static_cast<double>(c.ffn_hidden_size)) + tokens * (2 * h * e + 2 * 4);
  return bytes;
}

}  // namespace

double ring_key_value_columns(const model::ModelConfig& c) {
  if (c.mla.enabled)
    return 2.0 * static_cast<double>(c.num_attention_heads * std::max(c.mla.q_head_dim(), c.mla.v_head_dim));
  return 2.0 * static_cast<double>(c.num_query_groups * c.kv_channels);
}

double ring_buffer_bytes(const model::ModelConfig& c, const Layout& l) {
  if (l.cp == 1) return 0;
  const double kv = ring_key_value_columns(c) / l.tp;
  return 4 * l.sequence_per_rank(c.seq_length) * l.micro_batch_size * kv * l.activation_bytes();
}

double norm_parameters(const model::ModelConfig& c) {
  return c.normalization == model::Normalization::LayerNorm ? 2.0 * c.hidden_size : 1.0 * c.hidden_size;
}

RankParameters layer_parameters(const model::ModelConfig& c, const Layout& l, int64_t layer) {
  const double h = c.hidden_size, t = l.tp, bias = c.add_bias_linear ? 1 : 0;
  const double attn_out = static_cast<double>(c.num_attention_heads * c.kv_channels);
  RankParameters p;
  p.dense = 2 * norm_parameters(c) + c.qkv_size() * (h + bias) / t + h * attn_out / t + bias * h;
  if (c.mla.enabled) {  // the up projections and linear_proj split by heads; the down projections, norms replicated
    const model::MlaConfig& m = c.mla;
    const double a = static_cast<double>(c.num_attention_heads), dq = static_cast<double>(m.q_head_dim());
    const double qr = static_cast<double>(m.q_lora_rank), kr = static_cast<double>(m.kv_lora_rank);
    const double norm = c.qk_layernorm ? norm_parameters(c) / h : 0;  // per normalised feature
    p.dense = 2 * norm_parameters(c) + (m.q_lora_rank > 0 ? qr * h + a * dq * qr / t + norm * qr : a * dq * h / t) +
              (kr + static_cast<double>(m.qk_pos_emb_head_dim)) * h +
              a * static_cast<double>(m.qk_head_dim + m.v_head_dim) * kr / t + norm * kr +
              a * static_cast<double>(m.v_head_dim) * h / t + bias * h;
  }
  const model::MoeConfig& m = c.moe;
  const double experts = static_cast<double>(m.experts(layer));
  if (experts == 0) {
    p.dense += mlp_parameters(c, static_cast<double>(c.ffn_hidden_size), t);
    return p;
  }
  p.expert = experts / l.ep * mlp_parameters(c, static_cast<double>(m.ffn_hidden_size), l.expert_tp());
  p.dense += experts * (h + (m.expert_bias ? 1 : 0));  // the router (and its expert bias, a parameter Adam skips)
  if (m.shared_expert_intermediate_size > 0)
    p.dense += mlp_parameters(c, static_cast<double>(m.shared_expert_intermediate_size), t);
  if (m.residual) p.dense += mlp_parameters(c, static_cast<double>(c.ffn_hidden_size), t) + 2 * (h + 1);
  return p;
}

RankParameters mtp_parameters(const model::ModelConfig& c, const Layout& l) {
  RankParameters p;
  if (c.mtp_num_layers == 0) return p;
  const RankParameters layer = layer_parameters(c, l, c.num_layers);
  const double h = c.hidden_size, n = static_cast<double>(c.mtp_num_layers);
  p.dense = n * (3 * norm_parameters(c) + 2 * h * h / l.tp + layer.dense);
  p.expert = n * layer.expert;
  return p;
}

std::vector<int64_t> chunk_layer_numbers(const model::ModelConfig& c, const Layout& l, int stage, int chunk) {
  pipeline::ScheduleShape shape{l.pp, 1, l.virtual_stages};
  shape.zero_bubble = l.zero_bubble;  // ZB-V: rank r holds model chunks r and 2 pp - 1 - r
  const pipeline::LayerRange r = pipeline::chunk_layers(l.layer_split(c.num_layers), shape, {stage, chunk});
  std::vector<int64_t> layers;
  for (int i = 0; i < r.count; ++i) layers.push_back(r.first + i + 1);
  return layers;
}

RankParameters stage_parameters(const model::ModelConfig& c, const Layout& l, int stage) {
  const double h = c.hidden_size, vocab_shard = static_cast<double>(c.padded_vocab_size) / l.tp;
  RankParameters n;
  for (int chunk = 0; chunk < l.virtual_stages; ++chunk)
    for (int64_t layer : chunk_layer_numbers(c, l, stage, chunk)) {
      const RankParameters p = layer_parameters(c, l, layer);
      n.dense += p.dense;
      n.expert += p.expert;
    }
  if (stage == 0) {
    n.dense += vocab_shard * h;
    if (c.position_embedding == model::PositionEmbedding::LearnedAbsolute) n.dense += static_cast<double>(c.max_position_embeddings) * h;
  }
  if (stage == head_stage(l)) {  // a tied output layer on another rank than the embedding holds a copy
    n.dense += norm_parameters(c);
    if (c.untie_embeddings_and_output_weights || stage != 0) n.dense += vocab_shard * h;
    const RankParameters mtp = mtp_parameters(c, l);
    n.dense += mtp.dense + mtp_embedding_copies(c, l, stage);
    n.expert += mtp.expert;
  }
  return n;
}

double mtp_embedding_copies(const model::ModelConfig& c, const Layout& l, int stage) {
  // The embedding is on stage 0; under ZB-V so is the head, whose modules then use it (no copy).
  if (c.mtp_num_layers == 0 || stage != head_stage(l) || stage == 0) return 0;
  const double h = c.hidden_size;
  double copies = 0;
  // Tied, the output layer's copy of the word embedding is the modules' table already.
  if (c.untie_embeddings_and_output_weights) copies += static_cast<double>(c.padded_vocab_size) / l.tp * h;
  if (c.position_embedding == model::PositionEmbedding::LearnedAbsolute)
    copies += static_cast<double>(c.max_position_embeddings) * h;
  return copies;
}

double routed_rows(const model::ModelConfig& c, const Layout& l, int64_t layer) {
  const model::MoeConfig& m = c.moe;
  const int64_t experts = m.experts(layer);
  if (experts == 0) return 0;
  const int64_t tokens = c.seq_length / l.cp * l.micro_batch_size / (l.sequence_parallel ? l.tp : 1);
  const double rows = static_cast<double>(tokens * m.router.topk);
  if (m.dropless()) return rows;
  const double capacity =
      static_cast<double>(experts * kernels::expert_capacity(tokens, m.router.topk, experts, m.capacity_factor));
  return m.pad_expert_input_to_capacity ? capacity : std::min(rows, capacity);
}

double layer_activation_bytes(const model::ModelConfig& c, const Layout& l, int64_t layer) {
  const double s = l.sequence_per_rank(c.seq_length), b = l.micro_batch_size, h = c.hidden_size, t = l.tp, e = l.activation_bytes();
  const double sp = l.sequence_parallel ? t : 1;
  const double hidden_mask = c.hidden_dropout > 0 ? 1 : 0, attention_mask = c.attention_dropout > 0 ? 1 : 0;
  const double q = static_cast<double>(c.num_attention_heads * c.kv_channels);
  const double kv = 2.0 * static_cast<double>(c.num_query_groups * c.kv_channels);
  // Inputs of the two norms, their outputs (the QKV and fc1 inputs) and the two hidden-dropout masks:
  // Korthikanti's 10sbh, sharded along the sequence under sequence parallelism.
  double bytes = s * b * h * (4 * e + 2 * hidden_mask) / sp;
  // Q, K, V, the attention output (projection input), and a dense layer's fc1 output and fc2 input: 24sbh / t.
  // Multi-Latent Attention: its latents and its heads' q, k, v and output (model/activation_memory.h).
  if (c.mla.enabled)
    bytes += s * b * model::mla_attention_record_bytes(c, {l.micro_batch_size, static_cast<int64_t>(s), l.tp,
                                                           l.sequence_parallel}, e);
  else
    bytes += s * b * (q * e + kv * e + q * e) / t;
  bytes += c.moe.experts(layer) > 0 ? moe_activation_bytes(c, l, layer)
                                    : mlp_activation_bytes(c, l, static_cast<double>(c.ffn_hidden_size));
  const double heads = static_cast<double>(c.num_attention_heads) / t;
  if (l.flash_attention || l.cp > 1) {  // ring attention is the flash kernel's blocks merged by their lse
    bytes += b * heads * s * 4;  // the log-sum-exp of each row
  } else if (l.recompute != Recompute::Selective) {
    // Softmax output, dropout mask and dropout output: 5as^2b / t.
    bytes += b * heads * s * s * (e + attention_mask * (1 + e));
  }
  return bytes;
}

double layer_input_bytes(const model::ModelConfig& c, const Layout& l) {
  const double sp = l.sequence_parallel ? l.tp : 1;
  return l.sequence_per_rank(c.seq_length) * l.micro_batch_size * c.hidden_size * l.activation_bytes() / sp;
}

double weight_pass_bytes(const model::ModelConfig& c, const Layout& l, int stage, int chunk) {
  if (l.zero_bubble == pipeline::ZeroBubble::Off) return 0;
  // The layout the trainer's W pass is priced with (train/memory_report.cc): a rank's seq / cp tokens.
  const model::ActivationLayout a{l.micro_batch_size, c.seq_length / l.cp, l.tp, l.sequence_parallel,
                                  l.recompute == Recompute::Selective, l.ep, l.expert_tp()};
  double bytes = 0;
  for (int64_t layer : chunk_layer_numbers(c, l, stage, chunk)) bytes += model::layer_weight_gradient_bytes(c, a, layer);
  if (pipeline::is_last_chunk(schedule_shape(l), {stage, chunk}))
    bytes += model::head_weight_gradient_bytes(c, a) + model::mtp_weight_gradient_bytes(c, a);
  return bytes;
}

MemoryBreakdown stage_memory(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d, int stage, int in_flight,
                             const std::vector<pipeline::Op>* ops) {
  MemoryBreakdown m;
  m.in_flight = in_flight;
  const RankParameters params = stage_parameters(c, l, stage);
  const bool mixed = l.precision != Precision::Fp32;
  m.parameters = params.total() * (mixed ? 2 : 4);
  m.gradients = params.total() * l.gradient_bytes();
  // Adam's two moments, plus fp32 master weights under mixed precision: Megatron's 12 (or 8) bytes per
  // parameter, sharded by the distributed optimizer over the group that reduces the gradients: the
  // data-parallel group for dense parameters, the expert-data-parallel group for expert ones.
  const double state = mixed ? 12 : 8;
  m.optimizer = params.dense * state / (l.distributed_optimizer ? l.gradient_group() : 1);
  if (params.expert > 0) m.optimizer += params.expert * state / (l.distributed_optimizer ? l.edp() : 1);

  // Layers differ when some are MoE layers (or a pyramid's have more experts): a held micro-batch of a
  // chunk is priced as the stage's largest chunk, and the working memory as its largest layer.
  Layout whole = l;
  whole.recompute = Recompute::None;
  double largest_chunk = 0, largest_layer = 0, largest_rows = 0;
  std::vector<double> layers_bytes(static_cast<size_t>(l.virtual_stages), 0.0);
  for (int chunk = 0; chunk < l.virtual_stages; ++chunk) {
    double& bytes = layers_bytes[static_cast<size_t>(chunk)];
    for (int64_t layer : chunk_layer_numbers(c, l, stage, chunk)) {
      bytes += layer_activation_bytes(c, l, layer);
      largest_layer = std::max(largest_layer, layer_activation_bytes(c, whole, layer));
      largest_rows = std::max(largest_rows, routed_rows(c, l, layer));
    }
    largest_chunk = std::max(largest_chunk, bytes);
  }
  // (Counting the embedding or the loss as a layer gives the stage's other chunks this many.)
  const int64_t layers_per_chunk = l.layer_split(c.num_layers).counted_layers() / (static_cast<int64_t>(l.pp) * l.virtual_stages);
  const bool full = l.recompute == Recompute::Full;
  const int64_t group = full ? std::min<int64_t>(l.recompute_num_layers, layers_per_chunk) : 0;
  const int64_t groups_per_chunk = full ? (layers_per_chunk + group - 1) / group : 0;
  const double s = l.sequence_per_rank(c.seq_length), b = l.micro_batch_size, h = c.hidden_size;
  const double e = l.activation_bytes(), sp = l.sequence_parallel ? l.tp : 1;
  // The embedding's output and its dropout mask, per held micro-batch of the model's first chunk.
  const double embedding = s * b * h * (e + (c.hidden_dropout > 0 ? 1 : 0)) / sp;
  // The MTP modules' records per held micro-batch of the head's chunk: each module's layer as the last
  // layer (never recomputed), and its glue and own logits (model::mtp_module_extra_bytes).
  const double mtp = c.mtp_num_layers > 0
                         ? static_cast<double>(c.mtp_num_layers) *
                               (layer_activation_bytes(c, whole, c.num_layers) +
                                model::mtp_module_extra_bytes(c, {l.micro_batch_size, static_cast<int64_t>(s), l.tp,
                                                                  l.sequence_parallel}))
                         : 0.0;
  if (l.zero_bubble != pipeline::ZeroBubble::Off) {
    // Walked along the op list: records live from F to B, the W pass's tensors from B to W.
    const pipeline::ScheduleShape shape = schedule_shape(l);
    std::vector<pipeline::Op> built;
    if (ops == nullptr) ops = &(built = pipeline::build_schedule(shape, stage));
    std::vector<double> record(layers_bytes.size()), weight(layers_bytes.size());
    for (int chunk = 0; chunk < l.virtual_stages; ++chunk) {
      const size_t i = static_cast<size_t>(chunk);
      record[i] = full ? static_cast<double>(groups_per_chunk) * layer_input_bytes(c, l) : layers_bytes[i];
      if (pipeline::is_first_chunk(shape, {stage, chunk})) record[i] += embedding;
      if (pipeline::is_last_chunk(shape, {stage, chunk})) record[i] += mtp;
      weight[i] = weight_pass_bytes(c, l, stage, chunk);
    }
    double live = 0, peak = 0;
    for (const pipeline::Op& op : *ops) {
      const size_t i = static_cast<size_t>(op.chunk);
      if (op.kind == pipeline::OpKind::Forward) live += record[i];
      if (op.kind == pipeline::OpKind::Backward) live += weight[i] - record[i];
      if (op.kind == pipeline::OpKind::BackwardWeight) live -= weight[i];
      peak = std::max(peak, live);
    }
    m.activations = peak + static_cast<double>(group) * largest_layer;
  } else {
    if (full) {
      // Held chunk inputs, plus one group's full activations while it is recomputed for backward.
      m.activations = in_flight * groups_per_chunk * layer_input_bytes(c, l) + static_cast<double>(group) * largest_layer;
    } else {
      m.activations = in_flight * largest_chunk;
    }
    // Each held micro-batch of chunk 0 (stage 0), and of the head's chunk.
    const int chunk0 = (in_flight + l.virtual_stages - 1) / l.virtual_stages;
    if (stage == 0) m.activations += chunk0 * embedding;
    if (stage == head_stage(l)) m.activations += chunk0 * mtp;
  }
  // While a layer's backward runs, its gradients of the same tensors exist besides the saved ones: one
  // more layer's worth of working memory.
  m.activations += largest_layer;
  // fp32 logits of one micro-batch (their gradient is computed in place)
  if (stage == head_stage(l)) m.activations += s * b * static_cast<double>(c.padded_vocab_size) / l.tp * 4;
  // Pipeline send and receive buffers (whole activations after the all-gather), the sequence-parallel
  // all-gather buffer, and an MoE layer's routed rows gathered for the all-to-all.
  if (l.pp > 1) m.communication += 2 * s * b * h * e;
  if (l.sequence_parallel) m.communication += s * b * h * e;
  m.communication += largest_rows * h * e;
  m.communication += ring_buffer_bytes(c, l);
  m.reserved = d.reserved_bytes;
  return m;
}

}  // namespace tessera::plan
