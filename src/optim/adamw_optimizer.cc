#include "optim/adamw_optimizer.h"

#include <cmath>

#include "kernels/adamw.h"
#include "kernels/tensor_ops.h"

namespace tessera::optim {

AdamWOptimizer::AdamWOptimizer(model::ParameterSet& params, const AdamWConfig& config,
                               comm::ProcessGroup* model_parallel_group, bool counts_replicated)
    : params_(params), config_(config), model_parallel_group_(model_parallel_group),
      counts_replicated_(counts_replicated) {
  TESSERA_CHECK(params.allocated(), "AdamWOptimizer: parameters are not allocated");
  exp_avg_ = Tensor::zeros({params.numel()});
  exp_avg_sq_ = Tensor::zeros({params.numel()});
}

double AdamWOptimizer::grad_norm() const {
  bool single = model_parallel_group_ == nullptr || model_parallel_group_->size() == 1;
  if (single) return std::sqrt(kernels::sum_of_squares(params_.grads().flat_range(0, params_.numel())));
  double sum = 0;
  for (const model::Parameter& p : params_.params())
    if (!p.spec.tied_copy && (p.spec.sharding.sharded() || counts_replicated_)) sum += kernels::sum_of_squares(p.grad);
  // An fp32 scalar on the gradients' device, as Megatron all-reduces the norm.
  Tensor total = kernels::scalar_tensor(sum, params_.grads().device());
  model_parallel_group_->all_reduce(total);
  return std::sqrt(kernels::scalar_value(total));
}

MomentShard AdamWOptimizer::moments() const {
  MomentShard shard{{}, exp_avg_, exp_avg_sq_, false};
  for (const model::Parameter& p : params_.params()) shard.pieces.push_back({&p, 0, p.value.numel(), p.offset, false});
  return shard;
}

StepResult AdamWOptimizer::step(float lr, float loss_scale) {
  return adamw_update(moments(), config_, lr, loss_scale, grad_norm(), steps_);
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
    kernels::AdamWHyper h{lr, config.beta1, config.beta2, config.eps, p.spec.weight_decay ? config.weight_decay : 0.0f,
                          steps, scale};
    kernels::adamw_step(p.value.flat_range(piece.begin, piece.length), p.grad.flat_range(piece.begin, piece.length),
                        shard.exp_avg.flat_range(piece.state, piece.length),
                        shard.exp_avg_sq.flat_range(piece.state, piece.length), h);
  }
  return result;
}

}  // namespace tessera::optim
