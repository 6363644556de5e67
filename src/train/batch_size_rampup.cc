#include "train/batch_size_rampup.h"

#include "core/check.h"

namespace tessera::train {

int64_t GlobalBatchSchedule::at(int64_t consumed_samples) const {
  if (!ramps() || consumed_samples > rampup_->samples) return global_;
  const int64_t increments = (global_ - rampup_->start) / rampup_->increment;
  // Megatron: int(consumed / (samples / increments)), in floating point as Python's.
  const double per_increment = static_cast<double>(rampup_->samples) / static_cast<double>(increments);
  const auto steps = static_cast<int64_t>(static_cast<double>(consumed_samples) / per_increment);
  const int64_t size = rampup_->start + steps * rampup_->increment;
  TESSERA_CHECK(size <= global_, "batch-size ramp-up: ", size, " past the global batch size ", global_);
  return size;
}

int64_t GlobalBatchSchedule::iterations_for(int64_t train_samples) const {
  if (!ramps()) return train_samples / global_;
  int64_t iterations = 0, consumed = 0;
  // The ramp (the iteration that crosses its end included, as Megatron's <=), then whole final batches.
  while (consumed <= rampup_->samples && consumed <= train_samples) {
    consumed += at(consumed);
    ++iterations;
  }
  if (train_samples > consumed) iterations += (train_samples - consumed) / global_;
  return iterations;
}

int64_t GlobalBatchSchedule::samples_for(int64_t iterations) const {
  int64_t consumed = 0, i = 0;
  for (; i < iterations && ramps() && consumed <= rampup_->samples; ++i) consumed += at(consumed);
  return consumed + (iterations - i) * global_;
}

std::vector<int64_t> GlobalBatchSchedule::sizes() const {
  std::vector<int64_t> out;
  if (ramps())
    for (int64_t s = rampup_->start; s < global_; s += rampup_->increment) out.push_back(s);
  out.push_back(global_);
  return out;
}

}  // namespace tessera::train
