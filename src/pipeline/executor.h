// Runs one rank's op list (schedules.h): compute through the callbacks, communication through
// PipelineP2P, with the per-rank accounting that the training log prints.
#pragma once

#include <functional>

#include "pipeline/p2p.h"

namespace tessera::pipeline {

struct StageCallbacks {
  // The forward of (micro_batch, chunk) from `input` (undefined on the model's first chunk); returns the
  // output activation (undefined on the model's last chunk). With token slices (TeraPipe), of token slice
  // `slice` only: its input and output are the slice's rows.
  std::function<Tensor(int micro_batch, int chunk, int slice, const Tensor& input)> forward;
  // The backward from the gradient of the output (undefined on the last chunk); returns the gradient of
  // the input (undefined on the first chunk).
  std::function<Tensor(int micro_batch, int chunk, int slice, const Tensor& grad_output)> backward;
  // Zero-bubble schedules (pipeline/zero_bubble.h): the weight gradients of (micro_batch, chunk), whose
  // `backward` above computed the input gradient only. Unset: the schedule must have no W ops.
  std::function<void(int micro_batch, int chunk)> backward_weight;
};

// Seconds per category, accumulated over the iterations run.
struct PipelineTimes {
  double forward = 0, backward = 0, p2p_wait = 0, total = 0;  // backward: B and W passes
  int iterations = 0;
  // Zero bubble: the W passes' part of `backward`, and the passes run (for mean costs per pass).
  double backward_weight = 0;
  int64_t forward_passes = 0, backward_passes = 0, weight_passes = 0;
  PipelineTimes& operator+=(const PipelineTimes& o);
  // The pipeline bubble measured as (time in the schedule - compute) / compute.
  double bubble_fraction() const { return forward + backward > 0 ? (total - forward - backward) / (forward + backward) : 0; }
};

// Runs `ops` in order. p2p is null for a single stage. Receives are posted one compute op ahead, so a
// transfer overlaps the compute before it. A sent activation is released as soon as its send has
// completed (checked after each backward, and all at the end), since no backward needs a chunk's output.
void run_schedule(const std::vector<Op>& ops, PipelineP2P* p2p, const StageCallbacks& callbacks,
                  PipelineTimes& times);

}  // namespace tessera::pipeline
