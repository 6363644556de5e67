#include "train/distillation.h"

#include "ckpt/checkpoint.h"
#include "model/model_factory.h"

namespace tessera::train {

Teacher::Teacher(const TrainArguments& args, const parallel::TensorParallelContext& tp, DType cached_weight_type)
    : weights_{args.kd_alpha_ce, args.kd_beta_ce, args.kd_temp} {
  model_ = model::build_model_chunk(args.teacher_model, params_, tp, model::ModelChunk{});
  // Values only: nothing is ever backpropagated into the teacher.
  params_.allocate(args.seed, /*with_grads=*/false);
  if (cached_weight_type != DType::F32) params_.cache_rounded_weights(cached_weight_type);  // rounded once
  iteration_ = ckpt::load_checkpoint(args.load_teacher, params_, nullptr).iteration;
}

model::Distillation Teacher::target(const model::MicroBatch& batch, const model::ForwardContext& ctx) const {
  return {weights_, model_->logits(batch, ctx)};
}

}  // namespace tessera::train
