// The memory a rank needs, predicted before training (Megatron's report_theoretical_memory, for what
// Tessera stores) and measured while training (Tessera's own allocator accounting); and the start-up
// line of a mixed-precision run.
#pragma once

#include <string>

#include "pipeline/schedules.h"
#include "train/args/arguments.h"

namespace tessera::train {

struct MemoryPrediction {
  int64_t parameters = 0;          // held by this rank
  double bytes_per_parameter = 16;  // fp32 weight and gradient, Adam's moments (/ dp when distributed)
  double weight_and_optimizer = 0;  // bytes: fp32 weight, gradient and two Adam moments per parameter
  double activation_per_layer = 0;  // bytes one layer keeps per micro-batch (no recomputation)
  double korthikanti_per_layer = 0;  // the paper's 16-bit figure for the same layer
  double moe_layer_per_layer = 0;   // bytes the largest MoE layer of this stage keeps per micro-batch (0: none)
  // Zero bubble: the most bytes a chunk's W pass holds from its B to its W, per micro-batch (0: no W pass).
  double weight_pass_per_micro_batch = 0;
  double head_per_micro_batch = 0;  // bytes the last stage's output layer keeps per micro-batch (logits)
  double activations = 0;           // bytes held at the schedule's peak: layer records, ids and the head
  // --pipeline-token-slices: each micro-batch's key/value caches on this rank (every layer's keys and
  // values of the whole sequence, fp32), held from its first slice's forward to its last backward; the
  // layer records then keep no keys and values, and activations count the difference.
  double token_slice_caches = 0;
  // Mixed precision on the fp32 kernels: bytes of the GEMM weights' copies rounded once per step
  // (model::ParameterSet::cache_rounded_weights), part of weight_and_optimizer. Set by the trainer.
  double rounded_weights = 0;
  DType rounded_weights_type = DType::F32;  // what those copies are kept in (bf16 on a GPU)
};

// For pipeline stage `stage` holding `parameters` parameters.
MemoryPrediction predict_memory(const TrainArguments& a, const pipeline::ScheduleShape& schedule, int stage,
                                int64_t parameters);

// The start-up report, Megatron's "Theoretical memory footprints" line last.
std::string memory_report(const TrainArguments& a, const MemoryPrediction& p);

std::string megabytes(double bytes);  // "12.34"

// The start-up line of a --bf16/--fp16 run: what is 16-bit, which CPU features decided the GEMM path
// and which path it is (on a GPU: cuBLASLt's), and the loss scale.
std::string mixed_precision_summary(const TrainArguments& a);

}  // namespace tessera::train
