// Per-rank memory of a training run before it is launched: parameters, gradients and optimizer state
// (Megatron's bytes per parameter, with and without the distributed optimizer), activations with the
// formulas of Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
// Models") times the micro-batches the pipeline schedule holds at once plus one layer of backward
// working memory, and communication buffers.
#pragma once

#include <vector>

#include "model/config.h"
#include "plan/cluster.h"
#include "plan/layout.h"

namespace tessera::plan {

// Parameters of one norm, and of one transformer layer on one tensor-parallel rank.
double norm_parameters(const model::ModelConfig& c);
double layer_parameters(const model::ModelConfig& c, int tp);

// Parameters held by pipeline stage `stage` of one tensor-parallel rank (layers of its chunks, plus the
// embedding on the first stage and the final norm and output layer on the last; the tied output layer
// is a second copy of the embedding when pp > 1).
int64_t stage_parameters(const model::ModelConfig& c, const Layout& l, int stage);

// Activation bytes one transformer layer keeps for backward for one micro-batch on one tensor rank.
// For 16-bit activations, dropout on, and standard attention this is Korthikanti's
// s*b*h*(10 + 24/t + 5*a*s/(h*t)) (no sequence parallelism), s*b*h*(34/t + 5*a*s/(h*t)) (with it), the
// a*s terms dropped by selective recomputation; generalised here to grouped-query attention, SwiGLU,
// fp32 and flash attention (which keeps the 4-byte log-sum-exp instead of the s x s probabilities).
double layer_activation_bytes(const model::ModelConfig& c, const Layout& l);
// With full recomputation a layer group keeps only its input: s*b*h*e (divided by t under sequence
// parallelism).
double layer_input_bytes(const model::ModelConfig& c, const Layout& l);

struct MemoryBreakdown {
  double parameters = 0, gradients = 0, optimizer = 0, activations = 0, communication = 0, reserved = 0;
  int in_flight = 0;  // (micro-batch, chunk) pairs whose activations the stage holds at its peak
  double total() const { return parameters + gradients + optimizer + activations + communication + reserved; }
};

// The peak memory of one rank of pipeline stage `stage`. in_flight: the schedule's peak number of held
// (micro-batch, chunk) forwards on that stage (from the op list).
MemoryBreakdown stage_memory(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d, int stage, int in_flight);

}  // namespace tessera::plan
