#include "optim/adamw_optimizer.h"

#include <cmath>

#include "kernels/adamw.h"

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
  if (single) return std::sqrt(kernels::sum_of_squares(params_.grads().f32(), params_.numel()));
  double sum = 0;
  for (const model::Parameter& p : params_.params())
    if (!p.spec.tied_copy && (p.spec.sharding.sharded() || counts_replicated_))
      sum += kernels::sum_of_squares(p.grad.f32(), p.grad.numel());
  Tensor total = Tensor::empty({1});
  total.f32()[0] = static_cast<float>(sum);
  model_parallel_group_->all_reduce(total);
  return std::sqrt(static_cast<double>(total.f32()[0]));
}

StepResult AdamWOptimizer::step(float lr) {
  StepResult result;
  const Tensor& grads = params_.grads();
  result.grad_norm = grad_norm();
  if (!std::isfinite(result.grad_norm)) {
    result.skipped = true;
    return result;
  }
  if (config_.clip_grad > 0) {
    double coeff = config_.clip_grad / (result.grad_norm + 1e-6);
    if (coeff < 1.0) {
      float c = static_cast<float>(coeff);
      float* g = grads.f32();
      int64_t n = grads.numel();
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) g[i] *= c;
    }
  }
  ++steps_;
  for (model::Parameter& p : params_.params()) {
    kernels::AdamWHyper h{lr, config_.beta1, config_.beta2, config_.eps,
                          p.spec.weight_decay ? config_.weight_decay : 0.0f, steps_};
    kernels::adamw_step(p.value.f32(), p.grad.f32(), exp_avg_.f32() + p.offset, exp_avg_sq_.f32() + p.offset,
                        p.value.numel(), h);
  }
  return result;
}

}  // namespace tessera::optim
