// Megatron's distributed optimizer (--use-distributed-optimizer): Adam's moments are kept only for
// the part of the flat buffer this data-parallel rank owns, so each rank holds 1/dp of AdamW's state.
// The gradient buffer is reduce-scattered bucket by bucket (parallel::GradBuckets in ReduceScatter
// mode: each bucket split into dp equal pieces, its tail of fewer than dp elements all-reduced and
// owned by every rank), each rank clips and updates its pieces, and the parameters are then
// all-gathered over the same buckets, at once or overlapped with the next forward
// (--overlap-param-gather). Parameters are fp32 and serve as their own master weights.
#pragma once

#include <vector>

#include "comm/process_group.h"
#include "model/parameters.h"
#include "optim/adamw_optimizer.h"
#include "optim/optimizer.h"
#include "parallel/grad_buckets.h"

namespace tessera::optim {

class DistributedOptimizer : public Optimizer {
 public:
  // buckets: the ReduceScatter buckets over params' gradients and the data-parallel group `data_group`
  // (their layout decides what this rank owns). model_parallel_group and counts_replicated as for
  // AdamWOptimizer. overlap_param_gather: step() only starts the parameter all-gather and
  // wait_for_params() completes it; otherwise step() returns with the parameters complete.
  DistributedOptimizer(model::ParameterSet& params, const AdamWConfig& config, parallel::GradBuckets& buckets,
                       comm::ProcessGroup& data_group, comm::ProcessGroup* model_parallel_group = nullptr,
                       bool counts_replicated = true, bool overlap_param_gather = false);

  // The global norm from the reduced gradients this rank owns, summed over the data-parallel group
  // (bucket tails, owned by every rank, counted on data-parallel rank 0 only) and the model-parallel
  // group. Call after the buckets' finish() and the tensor/embedding gradient sums.
  double grad_norm() const override;
  StepResult step(float lr, float loss_scale = 1.0f) override;
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
  // The part of one parameter inside one owned range: flat offset, length, offset in the moments.
  struct Segment {
    const model::Parameter* param;
    int64_t flat, length, state;
    bool replicated;  // inside a bucket tail, owned by every data-parallel rank
  };
  // This layout's segments for data-parallel rank `rank`.
  std::vector<Segment> segments_for(int rank) const;

  model::ParameterSet& params_;
  AdamWConfig config_;
  parallel::GradBuckets& buckets_;
  comm::ProcessGroup& data_group_;
  comm::ProcessGroup* model_parallel_group_;
  bool counts_replicated_, overlap_param_gather_;
  std::vector<Segment> segments_;
  Tensor exp_avg_, exp_avg_sq_;  // this rank's segments, back to back
  int64_t steps_ = 0;
};

}  // namespace tessera::optim
