// The interval report: Megatron's timers line and Tessera's memory and ring figures, reduced over the
// ranks every --log-interval iterations.
#include <algorithm>
#include <cstdio>

#include "core/process_memory.h"
#include "train/device_setup.h"
#include "train/trainer.h"

namespace tessera::train {

void Trainer::log_timers(int64_t iterations) {
  const double per_iteration_ms = 1000.0 / static_cast<double>(std::max<int64_t>(iterations, 1));
  const pipeline::PipelineTimes& t = times_;
  const int stage = state_->coordinates().pp;
  enum { kForward, kBackward, kP2p, kReduce, kOptimizer, kBubble, kPeak, kStage, kActivations, kActivationsTheory,
         kAllTensors, kPeakRss, kRingWait, kFields };
  Tensor mine = Tensor::empty({kFields}, DType::F32, Device::cpu());  // the log's numbers, on the host
  float* v = mine.host_f32();
  v[kForward] = static_cast<float>(t.forward * per_iteration_ms);
  v[kBackward] = static_cast<float>(t.backward * per_iteration_ms);
  v[kP2p] = static_cast<float>(t.p2p_wait * per_iteration_ms);
  v[kReduce] = static_cast<float>(reduce_seconds_ * per_iteration_ms);
  v[kOptimizer] = static_cast<float>(optimizer_seconds_ * per_iteration_ms);
  v[kBubble] = static_cast<float>(t.bubble_fraction());
  v[kPeak] = static_cast<float>(peak_live_activations_);
  v[kStage] = static_cast<float>(stage);
  v[kActivations] = static_cast<float>(peak_activation_bytes_);
  v[kActivationsTheory] = static_cast<float>(memory_.activations);
  v[kAllTensors] = static_cast<float>(TensorMemory::peak_bytes());
  v[kPeakRss] = static_cast<float>(peak_resident_bytes());  // the kernel's count, to check the one above
  v[kRingWait] = static_cast<float>(ring_wait_seconds_ * per_iteration_ms);
  times_ = {};
  peak_activation_bytes_ = live_activation_bytes_;
  TensorMemory::reset_peak();
  reduce_seconds_ = optimizer_seconds_ = ring_wait_seconds_ = 0;
  peak_live_activations_ = 0;
  Tensor all = Tensor::empty({world_->size() * kFields}, DType::F32, Device::cpu());
  world_->all_gather(mine, all);
  if (!log_) return;

  // Megatron's timers: each as (min, max) over ranks, in ms per iteration.
  auto min_max = [&](int field) {
    float lo = all.host_f32()[field], hi = lo;
    for (int r = 1; r < world_->size(); ++r) {
      lo = std::min(lo, all.host_f32()[r * kFields + field]);
      hi = std::max(hi, all.host_f32()[r * kFields + field]);
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, "(%.1f, %.1f)", lo, hi);
    return std::string(buf);
  };
  say(str_cat("    timers (ms per iteration, min and max over ranks): forward-compute ", min_max(kForward),
              " | backward-compute ", min_max(kBackward), " | pipeline-p2p-wait ", min_max(kP2p),
              " | grads-reduce ", min_max(kReduce), " | optimizer ", min_max(kOptimizer),
              // The ring's exchange that its blocks did not hide (inside the compute timers above).
              args_.context_parallel_size > 1 ? str_cat(" | cp-ring-wait (in compute) ", min_max(kRingWait)) : ""));
  // Memory of world rank 0, and the largest over ranks of what differs between them.
  auto max_over_ranks = [&](int field) {
    float hi = 0;
    for (int r = 0; r < world_->size(); ++r) hi = std::max(hi, all.host_f32()[r * kFields + field]);
    return static_cast<double>(hi);
  };
  say(str_cat("    memory (MB): parameters ", megabytes(static_cast<double>(params_.values().nbytes())),
              " | gradients ", megabytes(static_cast<double>(params_.grads().nbytes())), " | optimizer state ",
              megabytes(static_cast<double>(optimizer_->state_bytes())),
              " | activations peak (max over ranks) ", megabytes(max_over_ranks(kActivations)), " (theory ",
              megabytes(max_over_ranks(kActivationsTheory)), ") | all tensors peak (max over ranks) ",
              megabytes(max_over_ranks(kAllTensors)), " | peak RSS (max over ranks) ",
              megabytes(max_over_ranks(kPeakRss)), device_memory_summary(args_.device)));
  // The engine's own line: the pipeline's bubble and activations held per stage, or what it keeps.
  std::vector<RankInterval> ranks(static_cast<size_t>(world_->size()));
  for (int r = 0; r < world_->size(); ++r)
    ranks[r] = {static_cast<int>(all.host_f32()[r * kFields + kStage]), all.host_f32()[r * kFields + kBubble],
                static_cast<int>(all.host_f32()[r * kFields + kPeak]), all.host_f32()[r * kFields + kActivations],
                all.host_f32()[r * kFields + kActivationsTheory]};
  if (const std::string line = engine_->interval_report(ranks); !line.empty()) say(line);
}

}  // namespace tessera::train
