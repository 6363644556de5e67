#include "optim/adamw_optimizer.h"

#include <cmath>

#include "kernels/adamw.h"
#include "kernels/tensor_ops.h"

namespace tessera::optim {

double global_grad_norm(const std::vector<NormPart>& parts, Device device) {
  double total = 0;
  for (const NormPart& part : parts) {
    Tensor t = kernels::scalar_tensor(part.squares, device);
    for (comm::ProcessGroup* g : part.over)
      if (g && g->size() > 1) g->all_reduce(t);
    total += kernels::scalar_value(t);
  }
  return std::sqrt(total);
}

bool counts_in_grad_norm(const model::ParameterSpec& spec, bool counts_replicated) {
  return !spec.tied_copy && (spec.sharding.sharded() || counts_replicated);
}

AdamWOptimizer::AdamWOptimizer(model::ParameterSet& params, const AdamWConfig& config,
                               comm::ProcessGroup* model_parallel_group, bool counts_replicated,
                               comm::ProcessGroup* expert_model_group, bool counts_replicated_experts)
    : params_(params), config_(config), model_parallel_group_(model_parallel_group),
      counts_replicated_(counts_replicated), expert_model_group_(expert_model_group),
      counts_replicated_experts_(counts_replicated_experts) {
  TESSERA_CHECK(params.allocated(), "AdamWOptimizer: parameters are not allocated");
  // Without expert parallelism (ep 1, etp = tp) both groups hold the same ranks: one all-reduce sums both.
  experts_apart_ = expert_model_group_ && !(model_parallel_group_ && expert_model_group_->world_ranks() ==
                                                                         model_parallel_group_->world_ranks());
  // Beside the parameters, on their device.
  exp_avg_ = Tensor::zeros({params.numel()}, DType::F32, params.values().device());
  exp_avg_sq_ = Tensor::zeros({params.numel()}, DType::F32, params.values().device());
}

double AdamWOptimizer::norm_of(const Tensor& flat, Tensor model::Parameter::*piece) const {
  auto spread = [](const comm::ProcessGroup* g) { return g != nullptr && g->size() > 1; };
  if (!spread(model_parallel_group_) && !spread(expert_model_group_))
    return std::sqrt(kernels::sum_of_squares(flat.flat_range(0, params_.numel())));
  // Every part on every rank, even one without expert parameters, so that the collectives match.
  std::vector<NormPart> parts{{0, {model_parallel_group_}}};
  if (experts_apart_) parts.push_back({0, {expert_model_group_}});
  for (const model::Parameter& p : params_.params()) {
    const bool is_expert =
        expert_model_group_ && p.spec.grad_reduce == model::ParameterSpec::GradReduce::ExpertDataParallel;
    if (counts_in_grad_norm(p.spec, is_expert ? counts_replicated_experts_ : counts_replicated_))
      parts[is_expert && experts_apart_ ? 1 : 0].squares += kernels::sum_of_squares(p.*piece);
  }
  return global_grad_norm(parts, flat.device());
}

MomentShard AdamWOptimizer::moments() const {
  MomentShard shard{{}, exp_avg_, exp_avg_sq_, false};
  for (const model::Parameter& p : params_.params()) shard.pieces.push_back({&p, 0, p.value.numel(), p.offset, false});
  return shard;
}

bool AdamWOptimizer::norm_spread() const {
  auto spread = [](const comm::ProcessGroup* g) { return g != nullptr && g->size() > 1; };
  return spread(model_parallel_group_) || spread(expert_model_group_);
}

StepResult AdamWOptimizer::step(float lr, float loss_scale) {
  // A norm summed over other ranks takes the per-parameter path (its parts are all-reduced on the host).
  if (norm_spread()) return adamw_update(moments(), config_, lr, loss_scale, grad_norm(), steps_);
  // One process's model: the norm in one launch, its clip factor left on the device for the one-launch
  // multi-tensor step, and the norm read back once, after both are queued.
  const Device device = params_.values().device();
  if (!segments_.rows.defined()) {
    std::vector<kernels::AdamWSegment> segments;
    for (const model::Parameter& p : params_.params())
      if (p.spec.trained()) segments.push_back({p.offset, p.value.numel(), p.offset, p.spec.weight_decay});
    segments_ = kernels::adamw_segment_table(segments, params_.numel(), exp_avg_.numel(), device);
    step_scalars_ = Tensor::zeros({kernels::kStepScalarWords}, DType::I64, device);
  }
  const int64_t n = params_.numel();
  const Tensor values = params_.values().flat_range(0, n), grads = params_.grads().flat_range(0, n);
  kernels::grad_norm_and_clip(grads, step_scalars_, config_.clip_grad, loss_scale);
  const kernels::AdamWHyper h{lr, config_.beta1, config_.beta2, config_.eps, config_.weight_decay, steps_ + 1, 1.0f};
  kernels::adamw_multi_step(values, grads, exp_avg_, exp_avg_sq_, segments_, h, step_scalars_);
  const kernels::StepScalars scalars = kernels::read_step_scalars(step_scalars_);
  StepResult result;
  result.grad_norm = scalars.grad_norm;
  result.skipped = !std::isfinite(scalars.grad_norm);  // the kernel left everything as it was
  if (!result.skipped) ++steps_;
  return result;
}

StepResult adamw_update(const MomentShard& shard, const AdamWConfig& config, float lr, float loss_scale,
                        double grad_norm, int64_t& steps) {
  StepResult result;
  result.grad_norm = grad_norm / loss_scale;
  if (!std::isfinite(result.grad_norm)) {
    result.skipped = true;
    return result;
  }
  // Clipping and unscaling multiply the gradients by `scale`; the AdamW kernel applies it as it reads
  // them, which saves a read and a write of the whole gradient buffer (the buffer itself stays as it is).
  const float scale = clip_factor(config.clip_grad, result.grad_norm) / loss_scale;
  ++steps;
  for (const MomentPiece& piece : shard.pieces) {
    const model::Parameter& p = *piece.param;
    if (!p.spec.trained()) continue;  // an expert bias: the trainer moves it (its moments stay 0)
    kernels::AdamWHyper h{lr, config.beta1, config.beta2, config.eps, p.spec.weight_decay ? config.weight_decay : 0.0f,
                          steps, scale};
    kernels::adamw_step(p.value.flat_range(piece.begin, piece.length), p.grad.flat_range(piece.begin, piece.length),
                        shard.exp_avg.flat_range(piece.state, piece.length),
                        shard.exp_avg_sq.flat_range(piece.state, piece.length), h);
  }
  return result;
}

}  // namespace tessera::optim
