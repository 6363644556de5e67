#include "pipeline/ouroboros_schedule.h"

#include "core/check.h"

namespace tessera::pipeline {

void validate_ouroboros(const OuroborosShape& shape) {
  TESSERA_CHECK(shape.modules >= 1, "Ouroboros needs at least 1 module, got ", shape.modules);
  TESSERA_CHECK(shape.warmup_iters >= 0, "--ouroboros-warmup-iters must be >= 0, got ", shape.warmup_iters);
}

int ouroboros_delay(const OuroborosShape& shape, int module, int64_t iteration) {
  TESSERA_CHECK(module >= 0 && module < shape.modules, "module ", module, " of ", shape.modules);
  if (iteration < shape.warmup_iters) return 0;
  return shape.modules - 1 - module;
}

int64_t ouroboros_backward_batch(const OuroborosShape& shape, int module, int64_t iteration) {
  const int64_t s = iteration - ouroboros_delay(shape, module, iteration);
  // In the warm-up s = t. After it, a mini-batch before N was applied synchronously when it ran forward:
  // none is applied twice.
  if (iteration >= shape.warmup_iters && s < shape.warmup_iters) return -1;
  return s;
}

bool ouroboros_keeps_record(const OuroborosShape& shape, int module, int64_t iteration) {
  return ouroboros_delay(shape, module, iteration) > 0;
}

std::vector<OuroborosStep> ouroboros_iteration(const OuroborosShape& shape, int64_t iteration) {
  validate_ouroboros(shape);
  std::vector<OuroborosStep> steps;
  for (int k = 0; k < shape.modules; ++k) {
    OuroborosStep step;
    step.module = k;
    step.forward_batch = iteration;
    step.backward_batch = ouroboros_backward_batch(shape, k, iteration);
    step.weight_version = step.backward_batch;
    if (step.backward_batch >= 0 && k + 1 < shape.modules) {
      // Module k + 1 ran this mini-batch's backward at s + its delay at that time: the same iteration
      // in the warm-up, the one before after it.
      step.output_grad_from_iteration = iteration < shape.warmup_iters ? iteration : iteration - 1;
    }
    steps.push_back(step);
  }
  return steps;
}

int ouroboros_rank_of_module(const OuroborosShape& shape, int module) {
  TESSERA_CHECK(module >= 0 && module < shape.modules, "module ", module, " of ", shape.modules);
  return module == shape.modules - 1 ? 0 : module;
}

int ouroboros_weight_versions(const OuroborosShape& shape, int module) {
  TESSERA_CHECK(module >= 0 && module < shape.modules, "module ", module, " of ", shape.modules);
  return shape.modules - 1 - module;
}

}  // namespace tessera::pipeline
