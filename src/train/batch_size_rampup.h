// Megatron's --rampup-batch-size START INCREMENT SAMPLES: the global batch starts at START samples and
// grows by INCREMENT each time another SAMPLES / ((global - START) / INCREMENT) samples have been
// consumed, reaching --global-batch-size after SAMPLES samples (GPT-3's schedule). The samples are the
// same stream either way (sample i is the run's i-th); only how many an iteration takes changes, and so
// its number of micro-batches. Megatron's RampupBatchsizeNumMicroBatchesCalculator and
// update_train_iters (megatron/core/num_microbatches_calculator.py, megatron/training/training.py).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace tessera::train {

struct BatchSizeRampup {
  int64_t start = 0, increment = 0, samples = 0;
};

class GlobalBatchSchedule {
 public:
  GlobalBatchSchedule() = default;
  GlobalBatchSchedule(int64_t global_batch_size, std::optional<BatchSizeRampup> rampup)
      : global_(global_batch_size), rampup_(rampup) {}

  bool ramps() const { return rampup_.has_value() && rampup_->start < global_; }
  const std::optional<BatchSizeRampup>& rampup() const { return rampup_; }
  int64_t final_size() const { return global_; }

  // The global batch of the iteration that starts after `consumed_samples` samples.
  int64_t at(int64_t consumed_samples) const;

  // The iterations that `train_samples` samples take (a last partial batch is dropped), as Megatron's
  // update_train_iters counts them.
  int64_t iterations_for(int64_t train_samples) const;

  // The samples that the first `iterations` iterations consume.
  int64_t samples_for(int64_t iterations) const;

  // Every global batch size the run passes through, smallest first (the final one last).
  std::vector<int64_t> sizes() const;

 private:
  int64_t global_ = 0;
  std::optional<BatchSizeRampup> rampup_;
};

}  // namespace tessera::train
