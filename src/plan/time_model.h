// Time of each piece of a training iteration on one device: GEMMs as a roofline (FLOPs at the
// device's sustained GEMM rate, or bytes at its memory bandwidth, whichever is slower), memory-bound
// kernels (norms, dropout, softmax, GELU, cross-entropy, Adam) by the bytes they move, and collectives
// by ring cost over the links the group spans (cluster.h). These per-op costs feed the pipeline
// simulator; the planner adds the data-parallel reduction and the optimizer step.
#pragma once

#include "model/config.h"
#include "plan/cluster.h"
#include "plan/layout.h"
#include "plan/pipeline_simulator.h"

namespace tessera::plan {

// Seconds of one GEMM C[m x n] = A[m x k] B[k x n] with elements of `element_bytes`, repeated `count`
// times (a batched GEMM). Uses a calibrated rate when the device has one for this shape.
double gemm_seconds(const DeviceSpec& d, double m, double n, double k, double element_bytes, double count = 1);

// One transformer layer, one micro-batch, one tensor rank. Backward includes the recomputation that
// the layout asks for (the whole forward for full, the core attention for selective).
struct LayerTimes {
  double forward_compute = 0, forward_comm = 0;    // comm: tensor-parallel all-reduces (or all-gather +
  double backward_compute = 0, backward_comm = 0;  //   reduce-scatter under sequence parallelism)
  double core_attention_forward = 0;               // part of forward_compute: QK^T, softmax, dropout, .V
};
LayerTimes layer_times(const model::GptConfig& c, const Layout& l, const DeviceSpec& d);

// The per-(stage, chunk) costs of one micro-batch for the pipeline simulator: the chunk's layers, the
// embedding on the model's first chunk, final norm, output layer and vocab-parallel cross-entropy on
// the last; the p2p transfer of 1/tp of an activation and its all-gather on arrival.
PipelineCosts pipeline_costs(const model::GptConfig& c, const Layout& l, const DeviceSpec& d);

// After the last backward: the gradient reduction over the data-parallel group (all-reduce, or
// reduce-scatter plus the all-gather of updated parameters with the distributed optimizer), the tied
// embedding's all-reduce between the first and last stage, and its part hidden behind backward when
// --overlap-grad-reduce / --overlap-param-gather. `last_backward` is the stage's final backward op time.
double data_parallel_seconds(const model::GptConfig& c, const Layout& l, const DeviceSpec& d, int stage,
                             double last_backward);
// The optimizer step of one rank: Adam over its (sharded) parameters, memory-bound.
double optimizer_seconds(const model::GptConfig& c, const Layout& l, const DeviceSpec& d, int stage);

}  // namespace tessera::plan
