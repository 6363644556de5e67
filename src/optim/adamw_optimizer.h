// AdamW over the flat parameter buffer, with gradient clipping by the global norm and fp32 moments.
// Biases and norm weights are not decayed (ParameterSpec::weight_decay), as in Megatron.
#pragma once

#include <vector>

#include "comm/process_group.h"
#include "kernels/adamw.h"
#include "model/parameters.h"
#include "optim/optimizer.h"

namespace tessera::optim {

struct AdamWConfig {
  float weight_decay = 0.01f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float clip_grad = 1.0f;  // 0 disables clipping
};

// One AdamW step over the pieces of `shard`, whose moments it updates in place. grad_norm is the
// global norm of the gradients as they are in the buffer, loss_scale times the true ones: the step uses
// the unscaled norm, skips (StepResult::skipped) when it is not finite, and otherwise applies clipping
// and unscaling as the kernel reads each gradient (one read of the gradients, none written), then
// increments `steps`.
StepResult adamw_update(const MomentShard& shard, const AdamWConfig& config, float lr, float loss_scale,
                        double grad_norm, int64_t& steps);

// One part of the global gradient norm: this rank's sum of squares of some gradients and the groups it
// is summed over, in turn (null or of one rank: skipped).
struct NormPart {
  double squares = 0;
  std::vector<comm::ProcessGroup*> over;
};
// The square root of the parts' sum, each part all-reduced over its groups first as an fp32 scalar on
// `device` (as Megatron all-reduces the norm). Collective: the ranks of a group pass their parts in the
// same order.
double global_grad_norm(const std::vector<NormPart>& parts, Device device);
// Whether this rank counts a parameter's gradient in the norm: never the tied embedding's copy on the
// last stage (its original is counted on the first), and one replicated over its tensor group only where
// counts_replicated (that group's rank 0), as Megatron's param_is_not_shared /
// param_is_not_tensor_parallel_duplicate.
bool counts_in_grad_norm(const model::ParameterSpec& spec, bool counts_replicated);

class AdamWOptimizer : public Optimizer {
 public:
  // model_parallel_group: the ranks that hold the other parts of this model replica (tensor x pipeline);
  // the dense gradients' norm is taken over all of them. Parameters replicated over the tensor group are
  // counted only where counts_replicated (tensor rank 0), and the tied embedding's copy on the last
  // pipeline stage not at all (counts_in_grad_norm). Null group: a single process.
  // expert_model_group: the same for expert parameters (grad_reduce ExpertDataParallel), whose model is
  // spread over expert tensor x expert x pipeline ranks (ParallelState::expert_tensor_model_pipeline_group);
  // counts_replicated_experts: this rank is expert tensor rank 0. The two sums are added, as the
  // distributed optimizer adds its gradient groups. Null: expert parameters count as dense ones.
  AdamWOptimizer(model::ParameterSet& params, const AdamWConfig& config,
                 comm::ProcessGroup* model_parallel_group = nullptr, bool counts_replicated = true,
                 comm::ProcessGroup* expert_model_group = nullptr, bool counts_replicated_experts = true);

  // The global L2 norm of the gradients over every shard of the model.
  double grad_norm() const override { return norm_of(params_.grads(), &model::Parameter::grad); }
  double params_norm() const override { return norm_of(params_.values(), &model::Parameter::value); }

  // Clips the gradients by their global norm and applies one AdamW step with learning rate lr.
  StepResult step(float lr, float loss_scale = 1.0f) override;
  void set_weight_decay(float weight_decay) override { config_.weight_decay = weight_decay; }

  int64_t steps() const override { return steps_; }
  void set_steps(int64_t steps) override { steps_ = steps; }
  int64_t state_bytes() const override { return static_cast<int64_t>(exp_avg_.nbytes() + exp_avg_sq_.nbytes()); }
  MomentShard moments() const override;  // every parameter whole
  const Tensor& exp_avg() const { return exp_avg_; }
  const Tensor& exp_avg_sq() const { return exp_avg_sq_; }

 private:
  // The norm of `flat` (the values or the gradients), through each parameter's `Parameter::*piece`.
  double norm_of(const Tensor& flat, Tensor model::Parameter::*piece) const;
  // Whether the gradient norm is summed over other ranks too (a model or expert group of several).
  bool norm_spread() const;
  model::ParameterSet& params_;
  AdamWConfig config_;
  comm::ProcessGroup* model_parallel_group_;
  bool counts_replicated_;
  comm::ProcessGroup* expert_model_group_;
  bool counts_replicated_experts_;
  bool experts_apart_;  // expert gradients are summed over other ranks than dense ones
  Tensor exp_avg_, exp_avg_sq_;  // same flat layout as the parameters
  // The one-process step's multi-tensor table of the trained parameters (made at the first step) and the
  // device scalars its gradient norm leaves for the update (kernels::StepScalars).
  kernels::AdamWSegmentTable segments_;
  Tensor step_scalars_;
  int64_t steps_ = 0;
};

}  // namespace tessera::optim
