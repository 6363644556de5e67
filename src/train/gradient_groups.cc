#include "train/gradient_groups.h"

#include <algorithm>

namespace tessera::train {

using GradReduce = model::ParameterSpec::GradReduce;

std::vector<GradientGroupSegments> gradient_group_segments(const model::ParameterSet& params) {
  std::vector<GradientGroupSegments> out;
  for (GradReduce reduce : {GradReduce::DataParallel, GradReduce::ExpertDataParallel}) {
    GradientGroupSegments g;
    g.reduce = reduce;
    for (const model::Parameter& p : params.params()) {
      if (p.spec.grad_reduce != reduce || p.value.numel() == 0) continue;
      const parallel::FlatRange range{p.offset, p.offset + p.value.numel()};
      g.segments.push_back(range);
      // The tied word embedding is a bucket of its own on the first and last stages, so that both split
      // it over the data-parallel ranks alike and its embedding-group sum works on the reduced pieces.
      if (p.spec.shared_with_last_stage) g.own_buckets.push_back(range);
    }
    if (g.segments.empty()) continue;
    g.segments = parallel::merge_segments(std::move(g.segments));
    out.push_back(std::move(g));
  }
  return out;
}

GroupedGradBuckets::GroupedGradBuckets(const model::ParameterSet& params, const comm::ParallelState& state,
                                       int64_t bucket_elements, bool distributed_optimizer, bool model_has_experts) {
  const comm::RankCoordinates rc = state.coordinates();
  for (GradientGroupSegments& g : gradient_group_segments(params)) {
    const bool expert = g.reduce == GradReduce::ExpertDataParallel;
    auto mode = distributed_optimizer ? parallel::GradBuckets::Mode::ReduceScatter : parallel::GradBuckets::Mode::AllReduce;
    if (!distributed_optimizer) g.own_buckets.clear();  // an all-reduce sums a bucket whole wherever it is cut
    buckets_.push_back(std::make_unique<parallel::GradBuckets>(params.grads(), bucket_elements,
                                                               state.gradient_group(expert), mode,
                                                               std::move(g.own_buckets), std::move(g.segments)));
    optimizer_groups_.push_back({buckets_.back().get(), &state.gradient_model_group(expert),
                                 expert ? rc.etp == 0 : rc.tp == 0});
  }
  // A pipeline stage without MoE layers (--moe-layer-freq's dense layers) holds no expert gradients, but the
  // norm sums the expert ones over expert tensor x expert x pipeline ranks, this stage's among them.
  const bool has_experts_here = std::any_of(params.params().begin(), params.params().end(), [](const model::Parameter& p) {
    return p.spec.grad_reduce == GradReduce::ExpertDataParallel && p.value.numel() > 0;
  });
  if (distributed_optimizer && model_has_experts && !has_experts_here)
    optimizer_groups_.push_back({nullptr, &state.gradient_model_group(true), rc.etp == 0});
}

void GroupedGradBuckets::mark_final_from(int64_t first_final) {
  for (auto& b : buckets_) b->mark_final_from(first_final);
}

void GroupedGradBuckets::finish() {
  for (auto& b : buckets_) b->finish();
}

void GroupedGradBuckets::wait_param_gather_below(int64_t end) {
  for (auto& b : buckets_) b->wait_param_gather_below(end);
}

std::vector<optim::GradientGroup> GroupedGradBuckets::optimizer_groups() const { return optimizer_groups_; }

}  // namespace tessera::train
