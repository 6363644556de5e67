#include "train/zero_bubble_timing.h"

#include <cstdio>

#include "core/check.h"

namespace tessera::train {

std::optional<std::string> ZeroBubbleTiming::update(int64_t iteration, comm::ProcessGroup& world) {
  if (taken_ || iteration < end_) return std::nullopt;
  taken_ = true;
  // Every rank's sums, gathered rather than all-reduced, so that every rank adds them in the same order
  // and builds the same lists.
  enum { kForward, kBackwardInput, kWeight, kForwardPasses, kBackwardPasses, kWeightPasses, kFields };
  Tensor mine = Tensor::empty({kFields}, DType::F32, Device::cpu());
  float* v = mine.host_f32();
  v[kForward] = static_cast<float>(window_.forward);
  v[kBackwardInput] = static_cast<float>(window_.backward - window_.backward_weight);
  v[kWeight] = static_cast<float>(window_.backward_weight);
  v[kForwardPasses] = static_cast<float>(window_.forward_passes);
  v[kBackwardPasses] = static_cast<float>(window_.backward_passes);
  v[kWeightPasses] = static_cast<float>(window_.weight_passes);
  Tensor all = Tensor::empty({world.size() * kFields}, DType::F32, Device::cpu());
  world.all_gather(mine, all);
  double sums[kFields] = {};
  for (int r = 0; r < world.size(); ++r)
    for (int f = 0; f < kFields; ++f) sums[f] += all.host_f32()[r * kFields + f];
  // A run resumed past the window timed nothing: it keeps the unit-cost lists.
  if (sums[kForwardPasses] == 0 || sums[kBackwardPasses] == 0 || sums[kWeightPasses] == 0) return std::nullopt;
  pipeline::ZeroBubbleCosts c;
  c.forward = sums[kForward] / sums[kForwardPasses];
  c.backward_input = sums[kBackwardInput] / sums[kBackwardPasses];
  c.backward_weight = sums[kWeight] / sums[kWeightPasses];
  costs_ = c;
  char line[200];
  std::snprintf(line, sizeof line, " > zero-bubble lists rebuilt from the mean pass times of iterations %lld-%lld: "
                "F %.3f ms, B %.3f ms, W %.3f ms", static_cast<long long>(start_ + 1), static_cast<long long>(end_),
                1e3 * c.forward, 1e3 * c.backward_input, 1e3 * c.backward_weight);
  return std::string(line);
}

void ZeroBubbleTiming::record(int64_t iteration, const pipeline::PipelineTimes& step) {
  if (iteration >= start_ && iteration < end_) window_ += step;
}

const std::vector<pipeline::Op>& ZeroBubbleTiming::ops(const pipeline::ScheduleShape& shape, int stage) {
  auto it = lists_.find(shape.micro_batches);
  if (it == lists_.end())
    it = lists_.emplace(shape.micro_batches, pipeline::build_zero_bubble_schedules(shape, *costs_)[stage]).first;
  return it->second;
}

}  // namespace tessera::train
