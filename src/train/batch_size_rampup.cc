#include "train/batch_size_rampup.h"

#include <algorithm>

#include "core/check.h"

namespace tessera::train {

GlobalBatchSchedule::GlobalBatchSchedule(std::vector<BatchSizeStep> steps) : steps_(std::move(steps)) {
  TESSERA_CHECK(!steps_.empty() && steps_[0].threshold == 0, "a step batch-size schedule starts at 0 samples");
  global_ = steps_.back().size;
}

int64_t GlobalBatchSchedule::at(int64_t consumed_samples) const {
  if (!steps_.empty()) {  // the last entry whose threshold has been reached
    const auto after = std::upper_bound(steps_.begin(), steps_.end(), consumed_samples,
                                        [](int64_t c, const BatchSizeStep& s) { return c < s.threshold; });
    return after == steps_.begin() ? steps_.front().size : std::prev(after)->size;
  }
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
  int64_t iterations = 0, consumed = 0;
  if (!steps_.empty()) {
    // Megatron's loop for a step schedule; past the last threshold, whole final batches and a partial one.
    for (; consumed < train_samples && consumed < steps_.back().threshold; ++iterations) consumed += at(consumed);
    return consumed >= train_samples ? iterations : iterations + (train_samples - consumed + global_ - 1) / global_;
  }
  if (!ramps()) return train_samples / global_;
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
  if (!steps_.empty())
    for (; i < iterations && consumed < steps_.back().threshold; ++i) consumed += at(consumed);
  else
    for (; i < iterations && ramps() && consumed <= rampup_->samples; ++i) consumed += at(consumed);
  return consumed + (iterations - i) * global_;
}

std::vector<BatchSizeStep> GlobalBatchSchedule::steps_used(int64_t iterations) const {
  std::vector<BatchSizeStep> used;
  int64_t consumed = 0;
  size_t entry = 0;  // the entry in force after `consumed` samples
  for (int64_t i = 0; i < iterations && !steps_.empty(); ++i) {
    const size_t before = entry;
    while (entry + 1 < steps_.size() && consumed >= steps_[entry + 1].threshold) ++entry;
    if (used.empty() || entry != before) used.push_back({consumed, steps_[entry].size});
    if (entry + 1 == steps_.size()) break;  // the last entry from here on
    consumed += steps_[entry].size;
  }
  return used;
}

std::vector<int64_t> GlobalBatchSchedule::sizes() const {
  std::vector<int64_t> out;
  if (rampup_ && ramps())
    for (int64_t s = rampup_->start; s < global_; s += rampup_->increment) out.push_back(s);
  out.push_back(global_);
  return out;
}

}  // namespace tessera::train
