// Time of each piece of a training iteration on one device: GEMMs as a roofline (FLOPs at the
// device's sustained GEMM rate, or bytes at its memory bandwidth, whichever is slower), memory-bound
// kernels (norms, dropout, softmax, GELU, cross-entropy, Adam) by the bytes they move, and collectives
// by ring cost over the links the group spans (cluster.h). These per-op costs feed the pipeline
// simulator; the planner adds the data-parallel reduction and the optimizer step.
#pragma once

#include <vector>

#include "model/config.h"
#include "plan/cluster.h"
#include "plan/layout.h"
#include "plan/pipeline_simulator.h"

namespace tessera::plan {

// Seconds of one GEMM C[m x n] = A[m x k] B[k x n] with elements of `element_bytes`, repeated `count`
// times (a batched GEMM). Uses a calibrated rate when the device has one for this shape, or for its (n, k)
// at other row counts (interpolated in m); else the device's rate with at least gemm_min_rows rows.
// Never less than the device's kernel floor.
double gemm_seconds(const DeviceSpec& d, double m, double n, double k, double element_bytes, double count = 1);

// What the weight gradient of a linear layer with m rows costs beyond its forward GEMM's time: the same
// FLOPs, but it reads and writes the fp32 gradient (k x n) as well as reading its inputs, which only a
// GEMM of many rows hides behind its FLOPs. A token slice of few rows pays it in full, once per slice.
double weight_gradient_extra(const DeviceSpec& d, double m, double n, double k, double element_bytes, double count = 1);

// Core attention (QK^T, softmax, dropout, .V) of one micro-batch on one rank: `queries` rows against
// `keys` keys per head, every score counted (as Megatron's FLOPs formula counts the causal s x s); the
// flash kernel's FLOPs at its rate, else the score GEMMs plus the scores' memory traffic.
struct AttentionTimes {
  double forward = 0, backward = 0;
};
AttentionTimes core_attention_times(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d, double queries,
                                    double keys);

// Ring attention (context parallelism, model/ring_attention.h) of one layer, one micro-batch, one rank:
// cp steps, at each of which the rank's two query chunks attend to the key/value chunks it holds, only
// the causal block pairs (Megatron's load balance: three chunk x chunk blocks at step 0, of which two
// diagonal, two full ones at the others, the same on every rank). Counted as core_attention_times counts
// the whole sequence (every score of a causal block), a step is core attention on seq / cp queries and
// keys, and the rank's cp steps are 1 / cp of the whole sequence's. The exchange of a step sends the held
// keys and values (seq / cp tokens) to the next rank of the cp group while the step computes: forward
// cp - 1 exchanges; backward cp - 1 of keys and values and, from step 1, the dK, dV sums with them, and
// the final sum's hop home after the last step. Exposed per step: max(0, exchange - step compute).
// All zero at cp 1.
struct RingTimes {
  double step_forward = 0, step_backward = 0;  // one step's attention compute
  double block_bytes = 0, exchange = 0;        // one step's keys and values, and their hop's seconds
  double exposed_forward = 0, exposed_backward = 0;
};
RingTimes ring_attention_times(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d);

// Transformer layer `layer` (1-based), one micro-batch, one rank. Under context parallelism it holds
// seq / cp tokens of each sequence (its GEMMs, elementwise kernels and tensor-parallel collectives scale
// with them) and attention is the ring's (ring_attention_times). Backward includes the recomputation
// that the layout asks for (the whole forward for full, the core attention for selective).
// An MoE layer's feed-forward is its router (an fp32 GEMM over the rank's T = s*b/tp tokens), its local
// experts' GEMMs as one batched product over the rows they receive (etp x routed_rows, balanced routing:
// each rank then does 1/tp of the micro-batch's T*k rows through experts of width f, the FLOPs of
// Megatron's MoE formula), and the shared expert and residual MLP as tp-split MLPs.
struct LayerTimes {
  double forward_compute = 0, forward_comm = 0;    // comm: tensor-parallel all-reduces (or all-gather +
  double backward_compute = 0, backward_comm = 0;  //   reduce-scatter under sequence parallelism), and
                                                   //   the expert-parallel collectives below
  double core_attention_forward = 0;               // part of forward_compute: QK^T, softmax, dropout, .V
  // Part of forward_comm and backward_comm: the token dispatch and combine of an MoE layer. With the
  // alltoall dispatcher an all-to-all over ep of the routed rows each way plus the all-gather and
  // reduce-scatter over etp; the allgather dispatcher all-gathers and reduce-scatters them over etp x ep.
  // Backward runs the same collectives as forward (plus forward's again under full recomputation).
  double expert_forward_comm = 0, expert_backward_comm = 0;
  // Part of forward_comm and backward_comm: the exposed part of the ring's exchange under context
  // parallelism (RingTimes; 0 at cp 1).
  double context_forward_comm = 0, context_backward_comm = 0;
  // Part of backward_compute: the weight-gradient GEMMs, which a zero-bubble schedule's W pass runs apart
  // from the input gradient (B).
  double backward_weight_compute = 0;
};
LayerTimes layer_times(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d, int64_t layer);

// The multi-token prediction modules (ModelConfig::mtp_num_layers) of one micro-batch on the head's rank,
// over the config's whole sequence: per module an embedding lookup, three norms, eh_proj, a layer as the
// model's last, and the output layer with its cross-entropy again. All zero without the modules.
// pipeline_costs adds them to the head's chunk; under token slices they run once, after the last slice
// (plan/token_slicing_price.h).
struct MtpTimes {
  double forward_compute = 0, forward_comm = 0, backward_compute = 0, backward_comm = 0;
};
MtpTimes mtp_times(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d);

// The per-(stage, chunk) costs of one micro-batch for the pipeline simulator: the chunk's layers, the
// embedding on the model's first chunk, final norm, output layer and vocab-parallel cross-entropy on
// the last; the p2p transfer of 1/tp of an activation and its all-gather on arrival.
PipelineCosts pipeline_costs(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d);

// The exposed part of collectives that become ready one after another during a compute phase of
// `compute` seconds and run one at a time, in order: each starts when it is ready and its predecessor
// has finished, and only what runs past the end of the phase is exposed. So a collective is hidden
// only by the compute left after it is ready, and one ready at the end is exposed in full.
struct Collective {
  double ready = 0, seconds = 0;
};
double exposed_after_compute(const std::vector<Collective>& collectives, double compute);

// After the last backward: the gradient reduction over the data-parallel group (dp x cp for dense
// gradients under context parallelism; all-reduce, or
// reduce-scatter plus the all-gather of updated parameters with the distributed optimizer) and the
// embedding group's all-reduce between the first and last stage (the tied word embedding, multi-token
// prediction's copies: memory_model.h's mtp_embedding_copies). The reduction is priced per bucket of
// --ddp-bucket-size, cut from the end of the stage's buffer as the trainer does. Under
// --overlap-grad-reduce each bucket starts when the stage's last backward op has finished every
// parameter in it (backward runs from the end of the buffer: the head, the layers from the last, the
// embedding, so the embedding's bucket is ready only at the end) and is hidden only by the backward
// left after that (exposed_after_compute). Under --overlap-param-gather the buckets' all-gathers run in
// buffer order from the end of the optimizer step, and the next forward waits for each bucket before
// its first layer. Buckets of the stage's other model chunks are ready when the last op starts, and
// needed when the first forward op ends. Expert parameters are a second buffer reduced over the
// expert-data-parallel group (ranks etp x ep apart) instead; the two buffers' buckets share the links
// and run one at a time in the order they become ready.
double data_parallel_seconds(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d, int stage);
// The optimizer step of one rank: Adam over its (sharded: dense over dp, expert over edp) parameters,
// memory-bound.
double optimizer_seconds(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d, int stage);

}  // namespace tessera::plan
