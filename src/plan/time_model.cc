#include "plan/time_model.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "plan/memory_model.h"

namespace tessera::plan {
namespace {

// A kernel takes at least DeviceSpec::kernel_seconds however little it does (a GPU waits for eager
// launches that arrive slower than tiny kernels finish): `kernels` kernels that move or compute
// `seconds` worth of work take the larger of the two. A layer's elementwise kernels are its two norms,
// two bias-dropout-adds, the activation and rotary in forward, each with its gradient in backward.
double at_least_kernels(double seconds, double kernels, const DeviceSpec& d) {
  return std::max(seconds, kernels * d.kernel_seconds);
}
constexpr double kLayerElementwiseKernels = 6;

// Bytes that norms, bias-dropout-add, activations and rotary move in one layer's forward, per the
// passes each makes over its tensors (reads plus writes); backward moves about twice as much.
double layer_elementwise_forward_bytes(const model::ModelConfig& c, const Layout& l, int64_t layer) {
  const double tokens = l.sequence_per_rank(c.seq_length) * l.micro_batch_size, e = l.activation_bytes();
  const double h = c.hidden_size, t = l.tp, sp = l.sequence_parallel ? t : 1;
  const double mask = c.hidden_dropout > 0 ? 1 : 0;
  // Bias and GELU over an MLP's fc1 output (read, write), or SwiGLU (read two halves, write one).
  auto activation = [&](double rows, double width) { return rows * width * (c.swiglu ? 3 * e : 2 * e); };
  // Two norms (read, write) and two bias-dropout-residual-adds (read two, write one, write the mask).
  double bytes = tokens * h / sp * (2 * 2 * e + 2 * (3 * e + mask));
  const model::MoeConfig& m = c.moe;
  if (m.experts(layer) == 0) {
    bytes += activation(tokens, static_cast<double>(c.ffn_hidden_size) / t);
  } else {
    // The experts' activations over their rows; the routed rows gathered from the tokens (read, write)
    // and their outputs scattered back into them (read the row and the token, write the token).
    const double rows = routed_rows(c, l, layer), etp = l.expert_tp();
    bytes += activation(etp * rows, static_cast<double>(m.ffn_hidden_size) / etp) + rows * h * 5 * e;
    if (m.shared_expert_intermediate_size > 0)
      bytes += activation(tokens, static_cast<double>(m.shared_expert_intermediate_size) / t);
    if (m.residual) bytes += activation(tokens, static_cast<double>(c.ffn_hidden_size) / t);
  }
  if (c.position_embedding == model::PositionEmbedding::Rope)
    bytes += tokens * static_cast<double>((c.num_attention_heads + c.num_query_groups) * c.kv_channels) / t * 2 * e;
  return bytes;
}

// The exposed cost of a layer's tensor-parallel collectives in one direction: an all-reduce of the
// activation after attention and after each tp-split MLP (an MoE layer's shared expert and residual
// MLP; its experts have their own collectives), or under sequence parallelism an all-gather before and
// a reduce-scatter after each (the same bytes).
double tensor_parallel_seconds(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d, int64_t layer) {
  const double bytes = l.sequence_per_rank(c.seq_length) * l.micro_batch_size * c.hidden_size * l.activation_bytes();
  const model::MoeConfig& m = c.moe;
  const double blocks = 1 + (m.experts(layer) == 0 ? 1 : (m.shared_expert_intermediate_size > 0) + m.residual);
  if (l.sequence_parallel)
    return blocks * (all_gather_seconds(d, bytes, l.tp, 1) + reduce_scatter_seconds(d, bytes, l.tp, 1));
  return blocks * all_reduce_seconds(d, bytes, l.tp, 1);
}

// An MoE layer's token dispatch and combine in one direction (see LayerTimes). Expert ranks are laid
// out etp fastest, then ep, then edp: the etp group has stride 1, the ep group stride etp.
double expert_parallel_seconds(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d, int64_t layer) {
  const double bytes = routed_rows(c, l, layer) * c.hidden_size * l.activation_bytes();  // each rank's rows
  const int etp = l.expert_tp();
  if (l.allgather_dispatcher) {
    const int group = etp * l.ep;
    return all_gather_seconds(d, group * bytes, group, 1) + reduce_scatter_seconds(d, group * bytes, group, 1);
  }
  return 2 * all_to_all_seconds(d, bytes, l.ep, etp) + all_gather_seconds(d, etp * bytes, etp, 1) +
         reduce_scatter_seconds(d, etp * bytes, etp, 1);
}

// The embedding and the head (final norm, output layer, cross-entropy) of one micro-batch.
struct EndTimes {
  double embed_forward, embed_backward, head_forward, head_backward, head_forward_comm, head_backward_comm;
};

// Without multi-token prediction (end_times adds the modules).
EndTimes main_end_times(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d) {
  const double tokens = l.sequence_per_rank(c.seq_length) * l.micro_batch_size, h = c.hidden_size;
  const double e = l.activation_bytes(), t = l.tp, sp = l.sequence_parallel ? t : 1;
  const double vocab = static_cast<double>(c.padded_vocab_size) / t, activation = tokens * h * e;
  // Embedding: gather rows, add positions, dropout; backward scatters into the (fp32) gradient rows.
  const double embed_forward = at_least_kernels(tokens * h / sp * 4 * e / d.memory_bandwidth, 1, d);
  const double embed_backward = at_least_kernels(tokens * h * (e + 8) / d.memory_bandwidth, 1, d);
  // Final norm, output GEMM and vocab-parallel cross-entropy over fp32 logits (max, sum, in-place grad).
  // (The final norm and the cross-entropy's two passes each take a kernel's floor at least.)
  const double head_forward = at_least_kernels(tokens * h / sp * 2 * e / d.memory_bandwidth, 1, d) +
                              gemm_seconds(d, tokens, vocab, h, e) +
                              at_least_kernels(tokens * vocab * 4 * 2 / d.memory_bandwidth, 2, d);
  const double head_backward = at_least_kernels(tokens * h / sp * 3 * e / d.memory_bandwidth, 1, d) +
                               2 * gemm_seconds(d, tokens, vocab, h, e) +
                               at_least_kernels(tokens * vocab * 4 * 2 / d.memory_bandwidth, 2, d);
  // The output layer's input is all-gathered under sequence parallelism (reduce-scattered in backward);
  // without it, its gradient is all-reduced. The cross-entropy's statistics are tiny all-reduces.
  const double head_forward_comm = (l.sequence_parallel ? all_gather_seconds(d, activation, l.tp, 1) : 0) +
                                   3 * all_reduce_seconds(d, tokens * 4, l.tp, 1);
  const double head_backward_comm = l.sequence_parallel ? reduce_scatter_seconds(d, activation, l.tp, 1)
                                                        : all_reduce_seconds(d, activation, l.tp, 1);
  return {embed_forward, embed_backward, head_forward, head_backward, head_forward_comm, head_backward_comm};
}

}  // namespace

MtpTimes mtp_times(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d) {
  if (c.mtp_num_layers == 0) return {};
  const double tokens = l.sequence_per_rank(c.seq_length) * l.micro_batch_size, h = c.hidden_size;
  const double e = l.activation_bytes(), t = l.tp, sp = l.sequence_parallel ? t : 1;
  // Each module: an embedding lookup, three norms, eh_proj (2h -> h / t, its output gathered over the
  // tensor group), a layer as the last and the output layer with its cross-entropy again.
  const EndTimes main = main_end_times(c, l, d);
  const double n = static_cast<double>(c.mtp_num_layers);
  const LayerTimes layer = layer_times(c, l, d, c.num_layers);
  const double norms = at_least_kernels(tokens * h / sp * 3 * 2 * e / d.memory_bandwidth, 3, d);
  const double eh_proj = gemm_seconds(d, tokens, h / t, 2 * h, e);
  const double gather = t > 1 ? all_gather_seconds(d, tokens * h * e, l.tp, 1) : 0;
  MtpTimes out;
  out.forward_compute = n * (main.embed_forward + norms + eh_proj + layer.forward_compute + main.head_forward);
  out.backward_compute =
      n * (main.embed_backward + 1.5 * norms + 2 * eh_proj + layer.backward_compute + main.head_backward);
  out.forward_comm = n * (gather + layer.forward_comm + main.head_forward_comm);
  out.backward_comm = n * (gather + layer.backward_comm + main.head_backward_comm);
  return out;
}

namespace {

// The embedding and the head of one micro-batch, the multi-token prediction modules on the head's.
EndTimes end_times(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d) {
  EndTimes out = main_end_times(c, l, d);
  const MtpTimes mtp = mtp_times(c, l, d);
  out.head_forward += mtp.forward_compute;
  out.head_backward += mtp.backward_compute;
  out.head_forward_comm += mtp.forward_comm;
  out.head_backward_comm += mtp.backward_comm;
  return out;
}

// The output layer's weight-gradient GEMM: the part of head_backward that a zero-bubble W runs.
double head_weight_gradient(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d) {
  const double tokens = l.sequence_per_rank(c.seq_length) * l.micro_batch_size;
  return gemm_seconds(d, tokens, static_cast<double>(c.padded_vocab_size) / l.tp, c.hidden_size, l.activation_bytes());
}

}  // namespace

namespace {

// The measured rate of an (m, n, k) product (0: none), and the rows it is priced at: the very shape's;
// else, where the calibration measured the same (n, k) at other row counts (it measures each of the
// model's shapes at a few short ones too, for token slices), the rate interpolated in m between the
// nearest two, the largest's above them, and below the smallest the smallest's time (fewer rows than
// that cost as much).
double measured_rate(const DeviceSpec& d, double m, double n, double k, double& rows) {
  const DeviceSpec::GemmRate *below = nullptr, *above = nullptr;
  for (const auto& r : d.gemm_rates) {
    if (r.n != std::llround(n) || r.k != std::llround(k)) continue;
    if (r.m == std::llround(m)) return r.flops_per_second;
    if (r.m < m && (!below || r.m > below->m)) below = &r;
    if (r.m > m && (!above || r.m < above->m)) above = &r;
  }
  if (!below && !above) return 0;
  if (!below) {
    rows = static_cast<double>(above->m);
    return above->flops_per_second;
  }
  if (!above) return below->flops_per_second;
  const double f = (m - static_cast<double>(below->m)) / static_cast<double>(above->m - below->m);
  return below->flops_per_second + f * (above->flops_per_second - below->flops_per_second);
}

}  // namespace

double gemm_seconds(const DeviceSpec& d, double m, double n, double k, double element_bytes, double count) {
  double rows = m;
  double rate = measured_rate(d, m, n, k, rows);  // measured: row tiles included
  if (rate == 0) {
    rate = d.peak_flops * d.gemm_efficiency;
    rows = std::max(m, d.gemm_min_rows);  // a short GEMM computes whole row tiles
  }
  const double flops = 2 * rows * n * k * count, bytes = (m * k + k * n + m * n) * element_bytes * count;
  return at_least_kernels(std::max(flops / rate, bytes / d.memory_bandwidth), 1, d);
}

double weight_gradient_extra(const DeviceSpec& d, double m, double n, double k, double element_bytes, double count) {
  const double as_forward = gemm_seconds(d, m, n, k, element_bytes, count);
  const double bytes = ((m * k + m * n) * element_bytes + 2.0 * 4 * k * n) * count;
  return std::max(0.0, bytes / d.memory_bandwidth - as_forward);
}

AttentionTimes core_attention_times(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d, double queries,
                                    double keys) {
  const double b = l.micro_batch_size, e = l.activation_bytes();
  // Multi-Latent Attention's scores are q_head_dim wide and its values v_head_dim: their mean.
  const double head_dim = c.mla.enabled ? static_cast<double>(c.mla.q_head_dim() + c.mla.v_head_dim) / 2
                                        : static_cast<double>(c.kv_channels);
  const double heads = static_cast<double>(c.num_attention_heads) / l.tp;
  AttentionTimes out;
  if (l.flash_attention) {
    const double flops = 4 * b * heads * queries * keys * head_dim;
    const double rate = d.attention_flops_per_second > 0 ? d.attention_flops_per_second : d.peak_flops * d.gemm_efficiency;
    out.forward = at_least_kernels(flops / rate, 1, d);
    out.backward = at_least_kernels(2.5 * flops / rate, 1, d);  // flash backward recomputes the scores: 5 GEMMs to 2
  } else {
    const double score_gemms = gemm_seconds(d, queries, keys, head_dim, e, b * heads) +
                               gemm_seconds(d, queries, head_dim, keys, e, b * heads);
    const double scores = b * heads * queries * keys, dropout = c.attention_dropout > 0 ? 1 : 0;
    // Fused scale-mask-softmax (read, write) then dropout (read, write, mask); backward one more read.
    out.forward = score_gemms + at_least_kernels(scores * (2 * e + dropout * (2 * e + 1)) / d.memory_bandwidth, 2, d);
    out.backward = 2 * score_gemms + at_least_kernels(scores * (3 * e + dropout * (2 * e + 1)) / d.memory_bandwidth, 2, d);
  }
  return out;
}

RingTimes ring_attention_times(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d) {
  RingTimes out;
  if (l.cp == 1) return out;
  // A step's blocks, counted as the whole-sequence attention counts them: every score of a causal
  // block (the kernel's rate is per counted score), so a full block, twice a diagonal one's work, is
  // two: each step's four chunk x chunk units are those of the rank's seq / cp queries and keys.
  Layout flash = l;
  flash.flash_attention = true;
  const double s = l.sequence_per_rank(c.seq_length);
  const AttentionTimes step = core_attention_times(c, flash, d, s, s);
  out.step_forward = step.forward;
  out.step_backward = step.backward;
  // The keys and values of the rank's seq / cp tokens (their gradients as large), to the next rank of
  // the cp group (stride tp): the ring is as slow as its slowest hop, across nodes when the group spans them.
  const double kv = ring_key_value_columns(c) / l.tp;
  out.block_bytes = s * l.micro_batch_size * kv * l.activation_bytes();
  const GroupLinks links = group_links(d, l.cp, l.tp);
  out.exchange = out.block_bytes / links.bandwidth + links.latency;
  // Forward: steps 0 .. cp - 2 pass the held block on while computing. Backward: steps 0 .. cp - 2 pass
  // the keys and values on, steps 1 .. cp - 1 the previous step's dK, dV sum; the last sum goes home
  // after the last step, exposed in full.
  for (int step = 0; step < l.cp; ++step) {
    const double forward = step + 1 < l.cp ? out.exchange : 0;
    const double backward = forward + (step > 0 ? out.exchange : 0);
    out.exposed_forward += std::max(0.0, forward - out.step_forward);
    out.exposed_backward += std::max(0.0, backward - out.step_backward);
  }
  out.exposed_backward += out.exchange;
  return out;
}

LayerTimes layer_times(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d, int64_t layer) {
  const double s = l.sequence_per_rank(c.seq_length), b = l.micro_batch_size, tokens = s * b, h = c.hidden_size;
  const double t = l.tp;
  const double e = l.activation_bytes(), head_dim = c.kv_channels;
  const double heads = static_cast<double>(c.num_attention_heads) / t;
  // Each linear layer: its forward GEMM, and what its weight gradient costs beyond that GEMM again.
  double gemms = 0, weight_gradients = 0;
  auto linear = [&](double rows, double n, double k, double element_bytes, double count = 1) {
    gemms += gemm_seconds(d, rows, n, k, element_bytes, count);
    weight_gradients += weight_gradient_extra(d, rows, n, k, element_bytes, count);
  };
  auto mlp = [&](double rows, double f, double split, double count) {  // fc1, fc2 of `count` MLPs of width f
    linear(rows, fc1_width(c, f) / split, h, e, count);
    linear(rows, h, f / split, e, count);
  };
  if (c.mla.enabled) {  // the down projections on the rank's rows, the up projections on its heads
    const model::MlaConfig& mla = c.mla;
    const double rows = tokens / (l.sequence_parallel ? t : 1), dq = static_cast<double>(mla.q_head_dim());
    const double qr = static_cast<double>(mla.q_lora_rank), kr = static_cast<double>(mla.kv_lora_rank);
    if (mla.q_lora_rank > 0) {
      linear(rows, qr, h, e);
      linear(tokens, heads * dq, qr, e);
    } else {
      linear(tokens, heads * dq, h, e);
    }
    linear(rows, kr + static_cast<double>(mla.qk_pos_emb_head_dim), h, e);
    linear(tokens, heads * static_cast<double>(mla.qk_head_dim + mla.v_head_dim), kr, e);
    linear(tokens, h, heads * static_cast<double>(mla.v_head_dim), e);
  } else {
    linear(tokens, c.qkv_size() / t, h, e);
    linear(tokens, h, heads * head_dim, e);
  }
  const model::MoeConfig& m = c.moe;
  const double experts = static_cast<double>(m.experts(layer));
  if (experts == 0) {
    mlp(tokens, static_cast<double>(c.ffn_hidden_size), t, 1);
  } else {
    const double local = experts / l.ep, etp = l.expert_tp();
    linear(tokens / (l.sequence_parallel ? t : 1), experts, h, 4);  // the fp32 router
    mlp(etp * routed_rows(c, l, layer) / local, static_cast<double>(m.ffn_hidden_size), etp, local);
    if (m.shared_expert_intermediate_size > 0) mlp(tokens, static_cast<double>(m.shared_expert_intermediate_size), t, 1);
    if (m.residual) mlp(tokens, static_cast<double>(c.ffn_hidden_size), t, 1);
  }

  // Core attention: QK^T and .V over the full s x s (as Megatron's FLOPs formula counts them); under
  // context parallelism the ring's cp steps (ring_attention_times).
  double attention_forward, attention_backward;
  RingTimes ring;
  if (l.cp == 1) {
    const AttentionTimes attention = core_attention_times(c, l, d, s, s);
    attention_forward = attention.forward;
    attention_backward = attention.backward;
  } else {
    ring = ring_attention_times(c, l, d);
    attention_forward = l.cp * ring.step_forward;
    attention_backward = l.cp * ring.step_backward;
  }
  const double elementwise = layer_elementwise_forward_bytes(c, l, layer) / d.memory_bandwidth;

  LayerTimes out;
  out.core_attention_forward = attention_forward;
  out.forward_compute = gemms + attention_forward + at_least_kernels(elementwise, kLayerElementwiseKernels, d);
  out.expert_forward_comm = out.expert_backward_comm = expert_parallel_seconds(c, l, d, layer);
  out.context_forward_comm = ring.exposed_forward;
  out.context_backward_comm = ring.exposed_backward;
  out.forward_comm = tensor_parallel_seconds(c, l, d, layer) + out.expert_forward_comm + out.context_forward_comm;
  out.backward_compute =
      2 * gemms + weight_gradients + attention_backward + at_least_kernels(2 * elementwise, kLayerElementwiseKernels, d);
  out.backward_comm = out.forward_comm - out.context_forward_comm + out.context_backward_comm;
  out.backward_weight_compute = gemms + weight_gradients;  // each linear layer's dW GEMM (and its extra cost)
  if (l.recompute == Recompute::Full) {
    out.backward_compute += out.forward_compute;
    out.backward_comm += out.forward_comm;
    out.expert_backward_comm += out.expert_forward_comm;
    out.context_backward_comm += out.context_forward_comm;
  } else if (l.recompute == Recompute::Selective && !l.flash_attention) {
    out.backward_compute += attention_forward;
  }
  return out;
}

PipelineCosts pipeline_costs(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d) {
  const double tokens = l.sequence_per_rank(c.seq_length) * l.micro_batch_size, h = c.hidden_size;
  const double e = l.activation_bytes(), t = l.tp;
  const double activation = tokens * h * e;

  const auto [embed_forward, embed_backward, head_forward, head_backward, head_forward_comm, head_backward_comm] =
      end_times(c, l, d);

  PipelineCosts costs;
  auto grid = [&](double value) { return std::vector<std::vector<double>>(l.pp, std::vector<double>(l.virtual_stages, value)); };
  costs.forward_compute = costs.forward_comm = costs.backward_compute = costs.backward_comm = grid(0);
  costs.backward_weight_compute = grid(0);
  if (c.moe.enabled()) costs.expert_comm = grid(0);
  if (l.cp > 1) costs.context_comm = grid(0);
  for (int r = 0; r < l.pp; ++r)
    for (int j = 0; j < l.virtual_stages; ++j) {
      // Layers of one kind (a dense MLP, or MoE with so many experts) cost the same: price each kind once.
      std::map<int64_t, std::pair<int64_t, double>> kinds;  // experts -> (one such layer, how many)
      for (int64_t layer : chunk_layer_numbers(c, l, r, j)) {
        auto& kind = kinds[c.moe.experts(layer)];
        kind.first = layer;
        kind.second += 1;
      }
      for (const auto& [experts, kind] : kinds) {
        const LayerTimes layer = layer_times(c, l, d, kind.first);
        costs.forward_compute[r][j] += kind.second * layer.forward_compute;
        costs.forward_comm[r][j] += kind.second * layer.forward_comm;
        costs.backward_compute[r][j] += kind.second * layer.backward_compute;
        costs.backward_comm[r][j] += kind.second * layer.backward_comm;
        costs.backward_weight_compute[r][j] += kind.second * layer.backward_weight_compute;
        if (experts > 0) costs.expert_comm[r][j] += kind.second * (layer.expert_forward_comm + layer.expert_backward_comm);
        if (l.cp > 1)
          costs.context_comm[r][j] += kind.second * (layer.context_forward_comm + layer.context_backward_comm);
      }
    }
  costs.forward_compute[0][0] += embed_forward;
  costs.backward_compute[0][0] += embed_backward;
  // The model's last chunk: the last rank's last, or under ZB-V rank 0's second.
  const pipeline::ChunkId head = pipeline::chunk_at(schedule_shape(l), l.pp * l.virtual_stages - 1);
  costs.forward_compute[head.stage][head.chunk] += head_forward;
  costs.forward_comm[head.stage][head.chunk] += head_forward_comm;
  costs.backward_compute[head.stage][head.chunk] += head_backward;
  costs.backward_comm[head.stage][head.chunk] += head_backward_comm;
  costs.backward_weight_compute[head.stage][head.chunk] += head_weight_gradient(c, l, d);
  // Neighbouring stages are tp * cp * dp ranks apart. Each tensor rank sends 1/tp of the activation (PTD-P's
  // scatter/gather); the receiver all-gathers it over the fast intra-node links. Under sequence
  // parallelism the activation is already sharded, so no gather is needed.
  if (l.pp > 1) {
    costs.p2p_transfer = p2p_seconds(d, activation / t, l.tp * l.cp * l.dp);
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
  const RankParameters total = stage_parameters(c, l, stage);
  const EndTimes ends = end_times(c, l, d);
  const double vocab_rows = static_cast<double>(c.padded_vocab_size) / l.tp * c.hidden_size;
  const double positions = c.position_embedding == model::PositionEmbedding::LearnedAbsolute
                               ? static_cast<double>(c.max_position_embeddings) * c.hidden_size : 0;
  // The stage's chunk 0, which its last forward and backward ops run, in flat (forward) order: the
  // embedding (first stage), the layers, the head (last stage without interleaving; the tied output
  // layer's gradient lands in the embedding's rows when there is one stage).
  struct Segment {
    RankParameters params;
    double forward, backward;
  };
  std::vector<Segment> chunk;
  if (stage == 0) chunk.push_back({{vocab_rows + positions, 0}, ends.embed_forward, ends.embed_backward});
  std::map<int64_t, LayerTimes> times;  // by the layer's experts (0: dense)
  for (int64_t layer : chunk_layer_numbers(c, l, stage, 0)) {
    auto it = times.find(c.moe.experts(layer));
    if (it == times.end()) it = times.emplace(c.moe.experts(layer), layer_times(c, l, d, layer)).first;
    chunk.push_back({layer_parameters(c, l, layer), it->second.forward_compute + it->second.forward_comm,
                     it->second.backward_compute + it->second.backward_comm});
  }
  if (stage == l.pp - 1 && l.virtual_stages == 1)
    chunk.push_back({{norm_parameters(c) + (c.untie_embeddings_and_output_weights || l.pp > 1 ? vocab_rows : 0) +
                          mtp_parameters(c, l).dense + mtp_embedding_copies(c, l, stage),
                      mtp_parameters(c, l).expert},
                     ends.head_forward + ends.head_forward_comm, ends.head_backward + ends.head_backward_comm});
  double forward = 0, backward = 0;
  for (const Segment& s : chunk) forward += s.forward, backward += s.backward;
  // Each buffer (dense or expert parameters) in flat order: when backward has finished, and when forward
  // first needs, its offset x (the other chunks' parameters sit above chunk 0's).
  auto of = [](const Segment& s, bool expert) { return expert ? s.params.expert : s.params.dense; };
  auto final_at = [&](double x, bool expert) {
    double begin = 0, t = 0;
    for (const Segment& s : chunk) begin += of(s, expert);
    if (x >= begin) return 0.0;
    for (auto it = chunk.rbegin(); it != chunk.rend(); ++it) {
      begin -= of(*it, expert);
      t += it->backward;
      if (x >= begin) break;
    }
    return t;
  };
  auto needed_at = [&](double x, bool expert) {
    double end = 0, t = 0;
    for (const Segment& s : chunk) {
      end += of(s, expert);
      if (x < end) return t;
      t += s.forward;
    }
    return forward;
  };

  const double bucket = std::max<double>(1, static_cast<double>(l.ddp_bucket_size));
  const double param_bytes = l.precision == Precision::Fp32 ? 4 : 2;
  std::vector<Collective> reduces, gathers;  // gathers in increasing flat order
  for (const bool expert : {false, true}) {
    const int group = expert ? l.edp() : l.gradient_group(), stride = expert ? l.expert_tp() * l.ep : l.tp;
    std::vector<Collective> buffer_gathers;
    const double buffer = expert ? total.expert : total.dense;
    // One simulated collective stands for `per` consecutive buckets (their seconds summed; its reduce is
    // ready with the last of them, its gather needed with the first), at most kMaxSimulatedBuckets per
    // buffer: a tiny --ddp-bucket-size or a huge model made one entry per bucket, which took the planner
    // minutes and gigabytes (1.5B parameters in buckets of 1 element: 16 GB). Below that count each bucket
    // is simulated on its own, as before.
    constexpr double kMaxSimulatedBuckets = 4096;
    const double per = std::max(1.0, std::ceil(std::ceil(buffer / bucket) / kMaxSimulatedBuckets));
    const auto group_seconds = [&](double n, auto&& seconds_of) {  // n elements cut into buckets
      if (per == 1) return seconds_of(n);
      const double full = std::floor(n / bucket), rest = n - full * bucket;
      return full * seconds_of(bucket) + (rest > 0 ? seconds_of(rest) : 0.0);
    };
    for (double end = buffer; end > 0; end -= bucket * per) {
      const double begin = std::max(0.0, end - bucket * per), n = end - begin;
      const double seconds = group_seconds(n, [&](double e) {
        return l.distributed_optimizer ? reduce_scatter_seconds(d, e * l.gradient_bytes(), group, stride)
                                       : all_reduce_seconds(d, e * l.gradient_bytes(), group, stride);
      });
      reduces.push_back({l.overlap_grad_reduce ? final_at(begin, expert) : backward, seconds});
      if (l.distributed_optimizer)
        buffer_gathers.push_back({l.overlap_param_gather ? needed_at(begin, expert) : 0.0,
                                  group_seconds(n, [&](double e) { return all_gather_seconds(d, e * param_bytes, group, stride); })});
    }
    std::reverse(buffer_gathers.begin(), buffer_gathers.end());  // into increasing flat order
    gathers.insert(gathers.end(), buffer_gathers.begin(), buffer_gathers.end());
  }
  auto by_ready = [](const Collective& a, const Collective& b) { return a.ready < b.ready; };
  std::stable_sort(reduces.begin(), reduces.end(), by_ready);
  std::stable_sort(gathers.begin(), gathers.end(), by_ready);
  const double reduce = exposed_after_compute(reduces, backward);
  // The all-gathers start together when the optimizer ends and run in order; the forward stalls by the
  // most any of them is late for its first use (without overlap, the step waits for all of them).
  double gather = 0, gathered = 0;
  for (const Collective& g : gathers) gathered += g.seconds, gather = std::max(gather, gathered - g.ready);
  // The embedding group (the first and the last stage) sums the gradients of what both hold: the tied
  // word embedding and multi-token prediction's copies of the word (untied) and position embeddings.
  // (Under ZB-V the head is on rank 0 and uses the embedding itself: nothing to all-reduce.)
  double shared = 0;
  if (head_stage(l) != 0 && (stage == 0 || stage == l.pp - 1))
    shared = (c.untie_embeddings_and_output_weights ? 0 : vocab_rows) + mtp_embedding_copies(c, l, l.pp - 1);
  const double embedding =
      shared > 0 ? all_reduce_seconds(d, shared * l.gradient_bytes(), 2, (l.pp - 1) * l.tp * l.cp * l.dp) : 0;
  return reduce + gather + embedding;
}

double optimizer_seconds(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d, int stage) {
  const RankParameters held = stage_parameters(c, l, stage);
  const double params = held.dense / (l.distributed_optimizer ? l.gradient_group() : 1) +
                        held.expert / (l.distributed_optimizer ? l.edp() : 1);
  // Adam reads the gradient, master weight and both moments and writes them back (plus the 16-bit copy);
  // the gradient norm reads the gradients once more.
  const double bytes_per_parameter = l.precision == Precision::Fp32 ? 32 : 34;
  return params * bytes_per_parameter / d.memory_bandwidth;
}

}  // namespace tessera::plan
