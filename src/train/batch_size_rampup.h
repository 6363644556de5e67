// Megatron's --rampup-batch-size START INCREMENT SAMPLES: the global batch starts at START samples and
// grows by INCREMENT each time another SAMPLES / ((global - START) / INCREMENT) samples have been
// consumed, reaching --global-batch-size after SAMPLES samples (GPT-3's schedule). The samples are the
// same stream either way (sample i is the run's i-th); only how many an iteration takes changes, and so
// its number of micro-batches. Megatron's RampupBatchsizeNumMicroBatchesCalculator and
// update_train_iters (megatron/core/num_microbatches_calculator.py, megatron/training/training.py).
// Or Megatron's --step-batch-size-schedule (train/step_batch_size_schedule.h): a size per range of
// consumed samples, which may grow or shrink.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "train/step_batch_size_schedule.h"

namespace tessera::train {

struct BatchSizeRampup {
  int64_t start = 0, increment = 0, samples = 0;
};

class GlobalBatchSchedule {
 public:
  GlobalBatchSchedule() = default;
  GlobalBatchSchedule(int64_t global_batch_size, std::optional<BatchSizeRampup> rampup)
      : global_(global_batch_size), rampup_(rampup) {}
  // A step schedule (non-empty, first threshold 0); its final size is the last entry's.
  explicit GlobalBatchSchedule(std::vector<BatchSizeStep> steps);

  // Whether the global batch changes during the run.
  bool ramps() const { return (rampup_.has_value() && rampup_->start < global_) || steps_.size() > 1; }
  const std::vector<BatchSizeStep>& steps() const { return steps_; }
  const std::optional<BatchSizeRampup>& rampup() const { return rampup_; }
  int64_t final_size() const { return global_; }

  // The global batch of the iteration that starts after `consumed_samples` samples.
  int64_t at(int64_t consumed_samples) const;

  // The iterations that `train_samples` samples take, as Megatron's update_train_iters counts them: a
  // ramp drops a last partial batch; a step schedule runs while fewer than `train_samples` are consumed.
  int64_t iterations_for(int64_t train_samples) const;

  // The samples that the first `iterations` iterations consume.
  int64_t samples_for(int64_t iterations) const;

  // Every global batch size a ramp passes through, smallest first (the final one last).
  std::vector<int64_t> sizes() const;

  // The step-schedule entries that the first `iterations` iterations use (Megatron applies only those: an
  // entry whose range an iteration jumps over is never used), each with the samples consumed when first used.
  std::vector<BatchSizeStep> steps_used(int64_t iterations) const;

 private:
  int64_t global_ = 0;
  std::optional<BatchSizeRampup> rampup_;
  std::vector<BatchSizeStep> steps_;  // or a step schedule
};

}  // namespace tessera::train
