// What the trainer asks of an optimizer, whether it keeps its state for the whole flat buffer
// (AdamWOptimizer) or only for this rank's data-parallel shard (DistributedOptimizer).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tessera::model {
struct Parameter;
}

namespace tessera::optim {

// Adam's moments as a checkpoint stores them: which element ranges of which parameters this rank
// holds, and where they are in its moment buffers.
struct MomentPiece {
  const model::Parameter* param;
  int64_t begin, length;  // elements [begin, begin + length) of this rank's tensor of the parameter (row-major)
  int64_t state;          // where they start in exp_avg and exp_avg_sq
  // The same piece is held by every rank of the data-parallel group that splits the parameter's
  // gradients (its spec's grad_reduce: data x context for dense, expert data for expert parameters):
  // save it once.
  bool on_every_data_rank;
};
struct MomentShard {
  std::vector<MomentPiece> pieces;
  Tensor exp_avg, exp_avg_sq;
  bool sharded = false;  // pieces of a data-parallel shard (DistributedOptimizer), not whole parameters
};

struct StepResult {
  double grad_norm = 0;  // before clipping, of the unscaled gradients
  bool skipped = false;  // the gradients held inf or NaN: no update was made
};

// The factor that clips gradients of global norm `grad_norm` to `clip_grad` (1 when they are within it
// or clipping is off); the AdamW kernel applies it as it reads each gradient.
inline float clip_factor(float clip_grad, double grad_norm) {
  if (clip_grad <= 0) return 1.0f;
  const double coeff = clip_grad / (grad_norm + 1e-6);
  return coeff < 1.0 ? static_cast<float>(coeff) : 1.0f;
}

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // The global L2 norm of the gradients (as they are in the buffer) over every shard of the model.
  virtual double grad_norm() const = 0;
  // The global L2 norm of the parameters, each counted once as grad_norm counts its gradient (Megatron's
  // --log-params-norm). Call after wait_for_params().
  virtual double params_norm() const = 0;
  // Clips the gradients by their global norm and applies one AdamW step with learning rate lr.
  // loss_scale: the gradients are those of the loss times this (optim/loss_scaler.h); the norm and the
  // update are of the gradients divided by it. Non-finite gradients skip the step.
  virtual StepResult step(float lr, float loss_scale = 1.0f) = 0;
  // The weight decay of the next steps (--weight-decay-incr-style changes it step by step).
  virtual void set_weight_decay(float weight_decay) = 0;
  // Blocks until the parameters are complete again (the distributed optimizer's overlapped parameter
  // all-gather); call before anything reads them: forward, evaluation, checkpoints.
  virtual void wait_for_params() {}

  virtual int64_t steps() const = 0;
  virtual void set_steps(int64_t steps) = 0;
  // Bytes of optimizer state this rank holds (Adam's two moments; fp32 parameters are their own master).
  virtual int64_t state_bytes() const = 0;
  // What this rank's moments cover, for ckpt::save_checkpoint.
  virtual MomentShard moments() const = 0;
};

}  // namespace tessera::optim
