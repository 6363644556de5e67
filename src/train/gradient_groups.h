// Gradient reduction per data-parallel group: each parameter's spec says which group sums its gradient
// (ParameterSpec::grad_reduce): dense parameters over the data x context ranks, expert parameters over
// the expert-data-parallel ranks (Megatron-Core's "parallel folding", where the two differ). The
// trainer keeps one GradBuckets per group present and drives them together.
#pragma once

#include <memory>
#include <vector>

#include "comm/parallel_state.h"
#include "model/parameters.h"
#include "optim/distributed_optimizer.h"
#include "parallel/grad_buckets.h"

namespace tessera::train {

// The flat segments of one group's parameters.
struct GradientGroupSegments {
  model::ParameterSpec::GradReduce reduce = model::ParameterSpec::GradReduce::DataParallel;
  std::vector<parallel::FlatRange> segments;     // increasing, touching ones merged
  std::vector<parallel::FlatRange> own_buckets;  // its parameters held by the first and last stage
};
// One entry per group that has parameters, dense first.
std::vector<GradientGroupSegments> gradient_group_segments(const model::ParameterSet& params);

class GroupedGradBuckets {
 public:
  // distributed_optimizer: ReduceScatter buckets (with the tied word embedding a bucket of its own);
  // otherwise AllReduce. model_has_experts: some layer of the whole model (any stage) is an MoE layer, so
  // that a stage without one still joins the expert gradients' norm (optimizer_groups).
  GroupedGradBuckets(const model::ParameterSet& params, const comm::ParallelState& state, int64_t bucket_elements,
                     bool distributed_optimizer, bool model_has_experts);

  // As GradBuckets', for every group.
  void mark_final_from(int64_t first_final);
  void finish();
  void wait_param_gather_below(int64_t end);

  // What the distributed optimizer needs of each group: its buckets, the rest of the model beside its
  // data-parallel group, and whether this rank counts parameters replicated over its tensor group. With
  // experts elsewhere in the model and none here, the expert group comes without buckets.
  std::vector<optim::GradientGroup> optimizer_groups() const;
  const std::vector<std::unique_ptr<parallel::GradBuckets>>& buckets() const { return buckets_; }

 private:
  std::vector<std::unique_ptr<parallel::GradBuckets>> buckets_;
  std::vector<optim::GradientGroup> optimizer_groups_;
};

}  // namespace tessera::train
