// Zero-bubble lists from measured costs, as the paper's Megatron fork builds them: training starts with
// lists built at F = B = W; the steps after iteration --zero-bubble-pipeline-timers-start-iter up to
// --zero-bubble-pipeline-timers-end-iter time every F, B and W pass on every rank, and the next step
// rebuilds the lists (pipeline/zero_bubble.h's greedy scheduler) from the mean F, B and W over all ranks.
// The order only moves W passes and forwards around; each weight's W passes stay in micro-batch order, so
// the losses and gradients are those of the unit-cost lists.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "pipeline/executor.h"
#include "pipeline/zero_bubble.h"

namespace tessera::train {

class ZeroBubbleTiming {
 public:
  ZeroBubbleTiming(int64_t start_iter, int64_t end_iter) : start_(start_iter), end_(end_iter) {}

  // Before the training step after `iteration` completed ones: once the window has passed, every rank of
  // `world` (each calls it at the same step) gathers the others' times and takes the same mean costs.
  // Returns a line for the log when it has just done so.
  std::optional<std::string> update(int64_t iteration, comm::ProcessGroup& world);
  // After that step: its times count when the step lies in the window.
  void record(int64_t iteration, const pipeline::PipelineTimes& step);

  // The measured costs, once taken.
  const std::optional<pipeline::ZeroBubbleCosts>& costs() const { return costs_; }
  // This stage's op list built with the measured costs (costs() set), kept per shape.
  const std::vector<pipeline::Op>& ops(const pipeline::ScheduleShape& shape, int stage);

 private:
  int64_t start_, end_;
  pipeline::PipelineTimes window_;  // this rank's times in the window
  bool taken_ = false;
  std::optional<pipeline::ZeroBubbleCosts> costs_;
  std::map<int, std::vector<pipeline::Op>> lists_;  // by micro-batch count (the global batch may ramp up)
};

}  // namespace tessera::train
