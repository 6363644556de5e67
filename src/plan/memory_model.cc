#include "plan/memory_model.h"

#include <algorithm>

namespace tessera::plan {

double norm_parameters(const model::ModelConfig& c) {
  return c.normalization == model::Normalization::LayerNorm ? 2.0 * c.hidden_size : 1.0 * c.hidden_size;
}

// Parameters of one transformer layer on one tensor rank: the column- and row-parallel weights are split,
// the norms and the row-parallel biases are replicated.
double layer_parameters(const model::ModelConfig& c, int tp) {
  const double h = c.hidden_size, t = tp, bias = c.add_bias_linear ? 1 : 0;
  const double fc1_out = c.swiglu ? 2.0 * c.ffn_hidden_size : 1.0 * c.ffn_hidden_size;
  const double attn_out = static_cast<double>(c.num_attention_heads * c.kv_channels);
  return 2 * norm_parameters(c) + c.qkv_size() * (h + bias) / t + h * attn_out / t + bias * h +
         fc1_out * (h + bias) / t + h * c.ffn_hidden_size / t + bias * h;
}

int64_t stage_parameters(const model::ModelConfig& c, const Layout& l, int stage) {
  const double h = c.hidden_size, vocab_shard = static_cast<double>(c.padded_vocab_size) / l.tp;
  double n = static_cast<double>(c.num_layers / l.pp) * layer_parameters(c, l.tp);
  if (stage == 0) {
    n += vocab_shard * h;
    if (c.position_embedding == model::PositionEmbedding::LearnedAbsolute) n += static_cast<double>(c.max_position_embeddings) * h;
  }
  if (stage == l.pp - 1) {
    n += norm_parameters(c);
    if (c.untie_embeddings_and_output_weights || l.pp > 1) n += vocab_shard * h;
  }
  return static_cast<int64_t>(n);
}

double layer_activation_bytes(const model::ModelConfig& c, const Layout& l) {
  const double s = c.seq_length, b = l.micro_batch_size, h = c.hidden_size, t = l.tp, e = l.activation_bytes();
  const double sp = l.sequence_parallel ? t : 1;
  const double hidden_mask = c.hidden_dropout > 0 ? 1 : 0, attention_mask = c.attention_dropout > 0 ? 1 : 0;
  const double q = static_cast<double>(c.num_attention_heads * c.kv_channels);
  const double kv = 2.0 * static_cast<double>(c.num_query_groups * c.kv_channels);
  const double fc1_out = c.swiglu ? 2.0 * c.ffn_hidden_size : 1.0 * c.ffn_hidden_size;
  // Inputs of the two norms, their outputs (the QKV and fc1 inputs) and the two hidden-dropout masks:
  // Korthikanti's 10sbh, sharded along the sequence under sequence parallelism.
  double bytes = s * b * h * (4 * e + 2 * hidden_mask) / sp;
  // Q, K, V, the attention output (projection input), fc1's output and fc2's input: 24sbh / t.
  bytes += s * b * (q * e + kv * e + q * e + fc1_out * e + c.ffn_hidden_size * e) / t;
  const double heads = static_cast<double>(c.num_attention_heads) / t;
  if (l.flash_attention) {
    bytes += b * heads * s * 4;  // the log-sum-exp of each row
  } else if (l.recompute != Recompute::Selective) {
    // Softmax output, dropout mask and dropout output: 5as^2b / t.
    bytes += b * heads * s * s * (e + attention_mask * (1 + e));
  }
  return bytes;
}

double layer_input_bytes(const model::ModelConfig& c, const Layout& l) {
  const double sp = l.sequence_parallel ? l.tp : 1;
  return static_cast<double>(c.seq_length) * l.micro_batch_size * c.hidden_size * l.activation_bytes() / sp;
}

MemoryBreakdown stage_memory(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d, int stage, int in_flight) {
  MemoryBreakdown m;
  m.in_flight = in_flight;
  const double params = static_cast<double>(stage_parameters(c, l, stage));
  const bool mixed = l.precision != Precision::Fp32;
  m.parameters = params * (mixed ? 2 : 4);
  m.gradients = params * l.gradient_bytes();
  // Adam's two moments, plus fp32 master weights under mixed precision: Megatron's 12 (or 8) bytes per
  // parameter, sharded over the data-parallel group by the distributed optimizer.
  m.optimizer = params * (mixed ? 12 : 8) / (l.distributed_optimizer ? l.dp : 1);

  const int64_t layers_per_chunk = c.num_layers / (static_cast<int64_t>(l.pp) * l.virtual_stages);
  if (l.recompute == Recompute::Full) {
    const int64_t group = std::min<int64_t>(l.recompute_num_layers, layers_per_chunk);
    const int64_t groups_per_chunk = (layers_per_chunk + group - 1) / group;
    Layout whole = l;
    whole.recompute = Recompute::None;
    // Held chunk inputs, plus one group's full activations while it is recomputed for backward.
    m.activations = in_flight * groups_per_chunk * layer_input_bytes(c, l) +
                    static_cast<double>(group) * layer_activation_bytes(c, whole);
  } else {
    m.activations = in_flight * layers_per_chunk * layer_activation_bytes(c, l);
  }
  // While a layer's backward runs, its gradients of the same tensors exist besides the saved ones: one
  // more layer's worth of working memory.
  {
    Layout whole = l;
    whole.recompute = Recompute::None;
    m.activations += layer_activation_bytes(c, whole);
  }
  const double s = c.seq_length, b = l.micro_batch_size, h = c.hidden_size, e = l.activation_bytes();
  const double sp = l.sequence_parallel ? l.tp : 1;
  if (stage == 0) {  // the embedding's output and its dropout mask, for each held micro-batch of chunk 0
    const int chunk0 = (in_flight + l.virtual_stages - 1) / l.virtual_stages;
    m.activations += chunk0 * s * b * h * (e + (c.hidden_dropout > 0 ? 1 : 0)) / sp;
  }
  if (stage == l.pp - 1)  // fp32 logits of one micro-batch (their gradient is computed in place)
    m.activations += s * b * static_cast<double>(c.padded_vocab_size) / l.tp * 4;
  // Pipeline send and receive buffers (whole activations after the all-gather), the sequence-parallel
  // all-gather buffer.
  if (l.pp > 1) m.communication += 2 * s * b * h * e;
  if (l.sequence_parallel) m.communication += s * b * h * e;
  m.reserved = d.reserved_bytes;
  return m;
}

}  // namespace tessera::plan
