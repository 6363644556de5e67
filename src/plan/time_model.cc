#include "plan/time_model.h"

#include <algorithm>
#include <cmath>

#include "plan/memory_model.h"

namespace tessera::plan {
namespace {

// Bytes that norms, bias-dropout-add, activations and rotary move in one layer's forward, per the
// passes each makes over its tensors (reads plus writes); backward moves about twice as much.
double layer_elementwise_forward_bytes(const model::ModelConfig& c, const Layout& l) {
  const double tokens = static_cast<double>(c.seq_length) * l.micro_batch_size, e = l.activation_bytes();
  const double h = c.hidden_size, t = l.tp, sp = l.sequence_parallel ? t : 1;
  const double mask = c.hidden_dropout > 0 ? 1 : 0;
  // Two norms (read, write) and two bias-dropout-residual-adds (read two, write one, write the mask).
  double bytes = tokens * h / sp * (2 * 2 * e + 2 * (3 * e + mask));
  // Bias and GELU over fc1's output (read, write), or SwiGLU (read two halves, write one).
  bytes += tokens * static_cast<double>(c.ffn_hidden_size) / t * (c.swiglu ? 3 * e : 2 * e);
  if (c.position_embedding == model::PositionEmbedding::Rope)
    bytes += tokens * static_cast<double>((c.num_attention_heads + c.num_query_groups) * c.kv_channels) / t * 2 * e;
  return bytes;
}

// The exposed cost of a layer's tensor-parallel collectives in one direction: two all-reduces of the
// activation, or under sequence parallelism two all-gathers and two reduce-scatters (the same bytes).
double tensor_parallel_seconds(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d) {
  const double bytes = static_cast<double>(c.seq_length) * l.micro_batch_size * c.hidden_size * l.activation_bytes();
  if (l.sequence_parallel)
    return 2 * (all_gather_seconds(d, bytes, l.tp, 1) + reduce_scatter_seconds(d, bytes, l.tp, 1));
  return 2 * all_reduce_seconds(d, bytes, l.tp, 1);
}

// The embedding and the head (final norm, output layer, cross-entropy) of one micro-batch.
struct EndTimes {
  double embed_forward, embed_backward, head_forward, head_backward, head_forward_comm, head_backward_comm;
};

EndTimes end_times(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d) {
  const double tokens = static_cast<double>(c.seq_length) * l.micro_batch_size, h = c.hidden_size;
  const double e = l.activation_bytes(), t = l.tp, sp = l.sequence_parallel ? t : 1;
  const double vocab = static_cast<double>(c.padded_vocab_size) / t, activation = tokens * h * e;
  // Embedding: gather rows, add positions, dropout; backward scatters into the (fp32) gradient rows.
  const double embed_forward = tokens * h / sp * 4 * e / d.memory_bandwidth;
  const double embed_backward = tokens * h * (e + 8) / d.memory_bandwidth;
  // Final norm, output GEMM and vocab-parallel cross-entropy over fp32 logits (max, sum, in-place grad).
  const double head_forward = tokens * h / sp * 2 * e / d.memory_bandwidth + gemm_seconds(d, tokens, vocab, h, e) +
                              tokens * vocab * 4 * 2 / d.memory_bandwidth;
  const double head_backward = tokens * h / sp * 3 * e / d.memory_bandwidth + 2 * gemm_seconds(d, tokens, vocab, h, e) +
                               tokens * vocab * 4 * 2 / d.memory_bandwidth;
  // The output layer's input is all-gathered under sequence parallelism (reduce-scattered in backward);
  // without it, its gradient is all-reduced. The cross-entropy's statistics are tiny all-reduces.
  const double head_forward_comm = (l.sequence_parallel ? all_gather_seconds(d, activation, l.tp, 1) : 0) +
                                   3 * all_reduce_seconds(d, tokens * 4, l.tp, 1);
  const double head_backward_comm = l.sequence_parallel ? reduce_scatter_seconds(d, activation, l.tp, 1)
                                                        : all_reduce_seconds(d, activation, l.tp, 1);
  return {embed_forward, embed_backward, head_forward, head_backward, head_forward_comm, head_backward_comm};
}

}  // namespace

double gemm_seconds(const DeviceSpec& d, double m, double n, double k, double element_bytes, double count) {
  double rate = d.peak_flops * d.gemm_efficiency;
  for (const auto& r : d.gemm_rates)
    if (r.m == std::llround(m) && r.n == std::llround(n) && r.k == std::llround(k)) rate = r.flops_per_second;
  const double flops = 2 * m * n * k * count, bytes = (m * k + k * n + m * n) * element_bytes * count;
  return std::max(flops / rate, bytes / d.memory_bandwidth);
}

LayerTimes layer_times(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d) {
  const double s = c.seq_length, b = l.micro_batch_size, tokens = s * b, h = c.hidden_size, t = l.tp;
  const double e = l.activation_bytes(), head_dim = c.kv_channels;
  const double heads = static_cast<double>(c.num_attention_heads) / t;
  const double fc1_out = c.swiglu ? 2.0 * c.ffn_hidden_size : 1.0 * c.ffn_hidden_size;
  const double gemms = gemm_seconds(d, tokens, c.qkv_size() / t, h, e) +
                       gemm_seconds(d, tokens, h, heads * head_dim, e) + gemm_seconds(d, tokens, fc1_out / t, h, e) +
                       gemm_seconds(d, tokens, h, c.ffn_hidden_size / t, e);

  // Core attention: QK^T and .V over the full s x s (as Megatron's FLOPs formula counts them).
  double attention_forward, attention_backward;
  if (l.flash_attention) {
    const double flops = 4 * b * heads * s * s * head_dim;
    const double rate = d.attention_flops_per_second > 0 ? d.attention_flops_per_second : d.peak_flops * d.gemm_efficiency;
    attention_forward = flops / rate;
    attention_backward = 2.5 * attention_forward;  // flash backward recomputes the scores: 5 GEMMs to forward's 2
  } else {
    const double score_gemms = gemm_seconds(d, s, s, head_dim, e, b * heads) + gemm_seconds(d, s, head_dim, s, e, b * heads);
    const double scores = b * heads * s * s, dropout = c.attention_dropout > 0 ? 1 : 0;
    // Fused scale-mask-softmax (read, write) then dropout (read, write, mask); backward one more read.
    attention_forward = score_gemms + scores * (2 * e + dropout * (2 * e + 1)) / d.memory_bandwidth;
    attention_backward = 2 * score_gemms + scores * (3 * e + dropout * (2 * e + 1)) / d.memory_bandwidth;
  }
  const double elementwise = layer_elementwise_forward_bytes(c, l) / d.memory_bandwidth;

  LayerTimes out;
  out.core_attention_forward = attention_forward;
  out.forward_compute = gemms + attention_forward + elementwise;
  out.forward_comm = tensor_parallel_seconds(c, l, d);
  out.backward_compute = 2 * gemms + attention_backward + 2 * elementwise;
  out.backward_comm = out.forward_comm;
  if (l.recompute == Recompute::Full) {
    out.backward_compute += out.forward_compute;
    out.backward_comm += out.forward_comm;
  } else if (l.recompute == Recompute::Selective && !l.flash_attention) {
    out.backward_compute += attention_forward;
  }
  return out;
}

PipelineCosts pipeline_costs(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d) {
  const double layers = static_cast<double>(c.num_layers) / (static_cast<double>(l.pp) * l.virtual_stages);
  const LayerTimes layer = layer_times(c, l, d);
  const double tokens = static_cast<double>(c.seq_length) * l.micro_batch_size, h = c.hidden_size;
  const double e = l.activation_bytes(), t = l.tp;
  const double activation = tokens * h * e;

  const auto [embed_forward, embed_backward, head_forward, head_backward, head_forward_comm, head_backward_comm] =
      end_times(c, l, d);

  PipelineCosts costs;
  auto grid = [&](double value) { return std::vector<std::vector<double>>(l.pp, std::vector<double>(l.virtual_stages, value)); };
  costs.forward_compute = grid(layers * layer.forward_compute);
  costs.forward_comm = grid(layers * layer.forward_comm);
  costs.backward_compute = grid(layers * layer.backward_compute);
  costs.backward_comm = grid(layers * layer.backward_comm);
  costs.forward_compute[0][0] += embed_forward;
  costs.backward_compute[0][0] += embed_backward;
  costs.forward_compute[l.pp - 1][l.virtual_stages - 1] += head_forward;
  costs.forward_comm[l.pp - 1][l.virtual_stages - 1] += head_forward_comm;
  costs.backward_compute[l.pp - 1][l.virtual_stages - 1] += head_backward;
  costs.backward_comm[l.pp - 1][l.virtual_stages - 1] += head_backward_comm;
  // Neighbouring stages are tp * dp ranks apart. Each tensor rank sends 1/tp of the activation (PTD-P's
  // scatter/gather); the receiver all-gathers it over the fast intra-node links. Under sequence
  // parallelism the activation is already sharded, so no gather is needed.
  if (l.pp > 1) {
    costs.p2p_transfer = p2p_seconds(d, activation / t, l.tp * l.dp);
    costs.p2p_local = l.sequence_parallel ? 0 : all_gather_seconds(d, activation, l.tp, 1);
  }
  return costs;
}

double exposed_after_compute(const std::vector<Collective>& collectives, double compute) {
  double finish = 0;
  for (const Collective& x : collectives) finish = std::max(finish, x.ready) + x.seconds;
  return std::max(0.0, finish - compute);
}

double data_parallel_seconds(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d, int stage) {
  const double total = static_cast<double>(stage_parameters(c, l, stage));
  const LayerTimes layer = layer_times(c, l, d);
  const EndTimes ends = end_times(c, l, d);
  const double vocab_rows = static_cast<double>(c.padded_vocab_size) / l.tp * c.hidden_size;
  const double positions = c.position_embedding == model::PositionEmbedding::LearnedAbsolute
                               ? static_cast<double>(c.max_position_embeddings) * c.hidden_size : 0;
  // The stage's chunk 0, which its last forward and backward ops run, in flat (forward) order: the
  // embedding (first stage), the layers, the head (last stage without interleaving; the tied output
  // layer's gradient lands in the embedding's rows when there is one stage).
  struct Segment {
    double params, forward, backward;
  };
  std::vector<Segment> chunk;
  if (stage == 0) chunk.push_back({vocab_rows + positions, ends.embed_forward, ends.embed_backward});
  const int64_t layers = c.num_layers / (static_cast<int64_t>(l.pp) * l.virtual_stages);
  for (int64_t i = 0; i < layers; ++i)
    chunk.push_back({layer_parameters(c, l.tp), layer.forward_compute + layer.forward_comm,
                     layer.backward_compute + layer.backward_comm});
  if (stage == l.pp - 1 && l.virtual_stages == 1)
    chunk.push_back({norm_parameters(c) + (c.untie_embeddings_and_output_weights || l.pp > 1 ? vocab_rows : 0),
                     ends.head_forward + ends.head_forward_comm, ends.head_backward + ends.head_backward_comm});
  double chunk_params = 0, forward = 0, backward = 0;
  for (const Segment& s : chunk) chunk_params += s.params, forward += s.forward, backward += s.backward;
  // When backward has finished, and when forward first needs, flat offset x (the other chunks' parameters
  // sit above chunk 0's).
  auto final_at = [&](double x) {
    double begin = chunk_params, t = 0;
    if (x >= begin) return 0.0;
    for (auto it = chunk.rbegin(); it != chunk.rend(); ++it) {
      begin -= it->params;
      t += it->backward;
      if (x >= begin) break;
    }
    return t;
  };
  auto needed_at = [&](double x) {
    double end = 0, t = 0;
    for (const Segment& s : chunk) {
      end += s.params;
      if (x < end) return t;
      t += s.forward;
    }
    return forward;
  };

  const double bucket = std::max<double>(1, static_cast<double>(l.ddp_bucket_size));
  const double param_bytes = l.precision == Precision::Fp32 ? 4 : 2;
  std::vector<Collective> reduces, gathers;  // gathers in increasing flat order
  for (double end = total; end > 0; end -= bucket) {
    const double begin = std::max(0.0, end - bucket), n = end - begin;
    const double seconds = l.distributed_optimizer ? reduce_scatter_seconds(d, n * l.gradient_bytes(), l.dp, l.tp)
                                                   : all_reduce_seconds(d, n * l.gradient_bytes(), l.dp, l.tp);
    reduces.push_back({l.overlap_grad_reduce ? final_at(begin) : backward, seconds});
    if (l.distributed_optimizer)
      gathers.insert(gathers.begin(), {l.overlap_param_gather ? needed_at(begin) : 0.0,
                                       all_gather_seconds(d, n * param_bytes, l.dp, l.tp)});
  }
  const double reduce = exposed_after_compute(reduces, backward);
  // The all-gathers start together when the optimizer ends and run in order; the forward stalls by the
  // most any of them is late for its first use (without overlap, the step waits for all of them).
  double gather = 0, gathered = 0;
  for (const Collective& g : gathers) gathered += g.seconds, gather = std::max(gather, gathered - g.ready);
  double embedding = 0;
  const bool holds_tied_embedding = !c.untie_embeddings_and_output_weights && l.pp > 1 && (stage == 0 || stage == l.pp - 1);
  if (holds_tied_embedding)
    embedding = all_reduce_seconds(d, vocab_rows * l.gradient_bytes(), 2, (l.pp - 1) * l.tp * l.dp);
  return reduce + gather + embedding;
}

double optimizer_seconds(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d, int stage) {
  const double params = static_cast<double>(stage_parameters(c, l, stage)) / (l.distributed_optimizer ? l.dp : 1);
  // Adam reads the gradient, master weight and both moments and writes them back (plus the 16-bit copy);
  // the gradient norm reads the gradients once more.
  const double bytes_per_parameter = l.precision == Precision::Fp32 ? 32 : 34;
  return params * bytes_per_parameter / d.memory_bandwidth;
}

}  // namespace tessera::plan
