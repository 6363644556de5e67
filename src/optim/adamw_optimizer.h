// AdamW over the flat parameter buffer, with gradient clipping by the global norm and fp32 moments.
// Biases and norm weights are not decayed (ParameterSpec::weight_decay), as in Megatron.
#pragma once

#include "comm/process_group.h"
#include "model/parameters.h"

namespace tessera::optim {

struct AdamWConfig {
  float weight_decay = 0.01f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float clip_grad = 1.0f;  // 0 disables clipping
};

struct StepResult {
  double grad_norm = 0;  // before clipping
  bool skipped = false;  // the gradients held inf or NaN: no update was made
};

class AdamWOptimizer {
 public:
  // model_parallel_group: the ranks that hold the other shards of this model replica (the tensor group
  // today); the gradient norm is taken over all of them, counting replicated parameters once (on
  // group rank 0). Null for a single process.
  AdamWOptimizer(model::ParameterSet& params, const AdamWConfig& config,
                 comm::ProcessGroup* model_parallel_group = nullptr);

  // The global L2 norm of the gradients over every shard of the model.
  double grad_norm() const;

  // Clips the gradients by their global norm and applies one AdamW step with learning rate lr.
  StepResult step(float lr);

  int64_t steps() const { return steps_; }
  void set_steps(int64_t steps) { steps_ = steps; }
  const Tensor& exp_avg() const { return exp_avg_; }
  const Tensor& exp_avg_sq() const { return exp_avg_sq_; }

 private:
  model::ParameterSet& params_;
  AdamWConfig config_;
  comm::ProcessGroup* model_parallel_group_;
  Tensor exp_avg_, exp_avg_sq_;  // same flat layout as the parameters
  int64_t steps_ = 0;
};

}  // namespace tessera::optim
