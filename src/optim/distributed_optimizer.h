// Megatron's distributed optimizer (--use-distributed-optimizer): Adam's moments are kept only for
// the part of the flat buffer this data-parallel rank owns, so each rank holds 1/dp of AdamW's state.
// The gradient buffer is reduce-scattered bucket by bucket (parallel::GradBuckets in ReduceScatter
// mode: each bucket split into dp equal pieces, its tail of fewer than dp elements all-reduced and
// owned by every rank), each rank clips and updates its pieces, and the parameters are then
// all-gathered over the same buckets, at once or overlapped with the next forward
// (--overlap-param-gather). Parameters are fp32 and serve as their own master weights.
//
// Several gradient groups: each GradBuckets covers the parameters one data-parallel group reduces (dense
// ones over data x context ranks, expert ones over the expert-data-parallel ranks), and this rank owns
// its pieces of every group's buckets. The gradient norm sums each group's squares over its data group
// and then over the ranks that hold the rest of the model beside it, and adds the groups.
#pragma once

#include <vector>

#include "comm/process_group.h"
#include "model/parameters.h"
#include "optim/adamw_optimizer.h"
#include "optim/optimizer.h"
#include "parallel/grad_buckets.h"

namespace tessera::optim {

// One group of gradients: its ReduceScatter buckets (whose group() is the data-parallel group that owns
// them), the ranks holding the rest of the model beside that group (tensor x pipeline for dense
// parameters, expert tensor x expert x pipeline for expert ones; null: none), and whether parameters
// replicated over its tensor group count on this rank (its tensor rank 0). Null buckets: a group this
// rank holds no gradients of (a pipeline stage without MoE layers in a model with some), which still
// joins its model group's norm sum with nothing, as the ranks of the other stages expect.
struct GradientGroup {
  parallel::GradBuckets* buckets = nullptr;
  comm::ProcessGroup* model_group = nullptr;
  bool counts_replicated = true;
};

class DistributedOptimizer : public Optimizer {
 public:
  // Every group's buckets must cover disjoint parts of params' gradients.
  DistributedOptimizer(model::ParameterSet& params, const AdamWConfig& config, std::vector<GradientGroup> groups,
                       bool overlap_param_gather = false);
  // One group: buckets, the ReduceScatter buckets over params' gradients and the data-parallel group
  // `data_group` (the buckets' own group; their layout decides what this rank owns).
  // model_parallel_group and counts_replicated as for AdamWOptimizer. overlap_param_gather: step() only
  // starts the parameter all-gather and wait_for_params() completes it; otherwise step() returns with
  // the parameters complete.
  DistributedOptimizer(model::ParameterSet& params, const AdamWConfig& config, parallel::GradBuckets& buckets,
                       comm::ProcessGroup& data_group, comm::ProcessGroup* model_parallel_group = nullptr,
                       bool counts_replicated = true, bool overlap_param_gather = false);

  // The global norm from the reduced gradients this rank owns, summed for each group over its
  // data-parallel group (bucket tails, owned by every rank, counted on its rank 0 only) and its model
  // group, then over the groups. Call after the buckets' finish() and the tensor/embedding gradient sums.
  double grad_norm() const override { return norm_of(params_.grads()); }
  // The parameters are whole on every rank after wait_for_params(); each rank counts the pieces whose
  // moments it owns, as for the gradients.
  double params_norm() const override { return norm_of(params_.values()); }
  StepResult step(float lr, float loss_scale = 1.0f) override;
  void set_weight_decay(float weight_decay) override { config_.weight_decay = weight_decay; }
  void wait_for_params() override;

  int64_t steps() const override { return steps_; }
  void set_steps(int64_t steps) override { steps_ = steps; }
  int64_t state_bytes() const override { return static_cast<int64_t>(exp_avg_.nbytes() + exp_avg_sq_.nbytes()); }
  // Elements of the flat buffer this rank keeps moments for.
  int64_t shard_numel() const { return exp_avg_.numel(); }

  // This rank's pieces of the parameters: a checkpoint stores them as they are, each rank its own.
  MomentShard moments() const override;
  // Takes this rank's shard of moments (and the step count) from a full-layout optimizer, e.g. one a
  // checkpoint was loaded into.
  void load_full_state(const AdamWOptimizer& full);

 private:
  // The norm of `flat` (the values or the gradients: the same layout) over the pieces this rank owns.
  double norm_of(const Tensor& flat) const;
  // The part of one parameter inside one owned range: flat offset, length, offset in the moments.
  struct Segment {
    const model::Parameter* param;
    int64_t flat, length, state;
    bool replicated;  // inside a bucket tail, owned by every data-parallel rank
    size_t group;     // index in groups_
  };
  // Group g's segments for its data-parallel rank `rank` (state offsets not yet assigned).
  std::vector<Segment> segments_for(size_t g, int rank) const;

  model::ParameterSet& params_;
  AdamWConfig config_;
  std::vector<GradientGroup> groups_;
  bool overlap_param_gather_;
  std::vector<Segment> segments_;  // of every group, in increasing flat order
  Tensor exp_avg_, exp_avg_sq_;  // this rank's segments, back to back
  int64_t steps_ = 0;
};

}  // namespace tessera::optim
