// Per-rank memory of a training run before it is launched: parameters, gradients and optimizer state
// (Megatron's bytes per parameter, with and without the distributed optimizer, which shards dense state
// over dp and expert state over edp), activations with the
// formulas of Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
// Models") times the micro-batches the pipeline schedule holds at once plus one layer of backward
// working memory, and communication buffers.
#pragma once

#include <vector>

#include "model/config.h"
#include "plan/cluster.h"
#include "pipeline/schedules.h"
#include "plan/layout.h"

namespace tessera::plan {

// Parameters one rank holds, by the group that reduces their gradients and shards their optimizer
// state: dense ones over dp, expert ones over edp (Megatron-Core's parallel folding).
struct RankParameters {
  double dense = 0, expert = 0;
  double total() const { return dense + expert; }
};

// The width of fc1's output for an MLP of width f: SwiGLU's gate and value halves make it 2f.
inline double fc1_width(const model::ModelConfig& c, double f) { return c.swiglu ? 2 * f : f; }

// Parameters of one norm.
double norm_parameters(const model::ModelConfig& c);
// Parameters of 1-based layer `layer` on one rank. Attention and a dense MLP are split over tp (norms
// and row-parallel biases replicated). An MoE layer holds its E / ep local experts, each an MLP of the
// expert width split over etp (expert parameters); its router (replicated), shared expert and residual
// MLP (split over tp like the MLP) and the residual coefficient Linear(h, 2) are dense.
RankParameters layer_parameters(const model::ModelConfig& c, const Layout& l, int64_t layer);
// Parameters of the multi-token prediction modules (ModelConfig::mtp_num_layers) on one rank of the stage
// with the head: per module enorm, hnorm and final_layernorm (replicated), eh_proj (2h -> h split over tp)
// and a layer as the model's last; they share the embedding and output layer.
RankParameters mtp_parameters(const model::ModelConfig& c, const Layout& l);

// The 1-based numbers of the layers of model chunk `chunk` on pipeline stage `stage`
// (pipeline::chunk_layers: chunk j of stage r is model chunk j * pp + r).
std::vector<int64_t> chunk_layer_numbers(const model::ModelConfig& c, const Layout& l, int stage, int chunk);

// Parameters held by one rank of pipeline stage `stage` (layers of its chunks, plus the embedding on the
// first stage and the final norm and output layer on the last; the tied output layer is a second copy
// of the embedding when pp > 1, and multi-token prediction's copies are there too: mtp_embedding_copies).
RankParameters stage_parameters(const model::ModelConfig& c, const Layout& l, int stage);
// The last stage's copies of first-stage embeddings that multi-token prediction looks up there when the
// embedding is on another rank (model/gpt_model.cc's stage_copy, Megatron-Core's embedding on an
// mtp_process stage): the word embedding's vocabulary shard when untied (tied, the output layer's copy
// serves) and the learned absolute position embedding. Parameters like any other (a gradient, Adam's
// moments, dense: sharded over dp by the distributed optimizer), summed over the embedding group, left out
// of the gradient norm and checkpoints. 0 on other stages, at pp 1, under ZB-V and without the modules.
double mtp_embedding_copies(const model::ModelConfig& c, const Layout& l, int stage);

// Routed rows one rank sends to the experts of MoE layer `layer` per micro-batch, and (routing assumed
// balanced) receives from the all-to-all before the etp all-gather: T * k for dropless routing, where T
// = s * b / tp are the rank's tokens (each tensor rank routes its sequence shard); with a capacity
// factor at most E * capacity (exactly that when padded to capacity). 0 for a dense layer.
double routed_rows(const model::ModelConfig& c, const Layout& l, int64_t layer);

// Activation bytes 1-based layer `layer` keeps for backward for one micro-batch on one tensor rank.
// For 16-bit activations, dropout on, and standard attention a dense layer keeps Korthikanti's
// s*b*h*(10 + 24/t + 5*a*s/(h*t)) (no sequence parallelism), s*b*h*(34/t + 5*a*s/(h*t)) (with it), the
// a*s terms dropped by selective recomputation; generalised here to grouped-query attention, SwiGLU,
// fp32 and flash attention (which keeps the 4-byte log-sum-exp instead of the s x s probabilities).
// An MoE layer keeps the same attention and norm terms; its feed-forward terms are in memory_model.cc.
double layer_activation_bytes(const model::ModelConfig& c, const Layout& l, int64_t layer);
// With full recomputation a layer group keeps only its input: s*b*h*e (divided by t under sequence
// parallelism).
double layer_input_bytes(const model::ModelConfig& c, const Layout& l);

// The columns of a token's keys and values that ring attention passes on, over the whole tensor group:
// 2 x query groups x kv_channels, or under Multi-Latent Attention each head's key and value, both as wide
// as the attention's heads (max(q_head_dim, v_head_dim), the narrower zero-padded: model/multi_latent_attention.h).
double ring_key_value_columns(const model::ModelConfig& c);

// The ring's buffers of context parallelism (0 at cp 1), held while one layer's attention runs: in
// backward, the next rank's keys and values arriving, the earlier ranks' dK and dV arriving, this step's
// dK and dV, and the previous step's sum in flight to the next rank: four times the K and V of the
// seq / cp tokens a rank holds (a forward step holds only the first).
double ring_buffer_bytes(const model::ModelConfig& c, const Layout& l);

struct MemoryBreakdown {
  double parameters = 0, gradients = 0, optimizer = 0, activations = 0, communication = 0, reserved = 0;
  int in_flight = 0;  // (micro-batch, chunk) pairs whose activations the stage holds at its peak
  double total() const { return parameters + gradients + optimizer + activations + communication + reserved; }
};

// Zero bubble (ZB-H1, ZB-V): what chunk `chunk` of stage `stage` holds for one micro-batch from its B to
// its W instead of its record: each deferred GEMM's fp32 input and output gradient over the whole sequence
// (model::layer_weight_gradient_bytes for its layers, and on the model's last chunk the output layer's and
// the multi-token prediction modules': head_weight_gradient_bytes, mtp_weight_gradient_bytes). 0 without
// zero bubble.
double weight_pass_bytes(const model::ModelConfig& c, const Layout& l, int stage, int chunk);

// The peak memory of one rank of pipeline stage `stage`. in_flight: the schedule's peak number of held
// (micro-batch, chunk) forwards on that stage (from the op list). Under zero bubble the activations are
// the peak of a walk of the stage's op list (`ops`; built here when null): a forward adds its chunk's
// record, a B frees it and adds the chunk's weight_pass_bytes, a W frees those (train/memory_report.cc's
// walk over the planner's records).
MemoryBreakdown stage_memory(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d, int stage, int in_flight,
                             const std::vector<pipeline::Op>* ops = nullptr);

}  // namespace tessera::plan
