#include "train/distillation.h"

#include <optional>

#include "ckpt/checkpoint.h"
#include "model/model_factory.h"

namespace tessera::train {

Teacher::Teacher(const TrainArguments& args, const parallel::TensorParallelContext& tp, DType cached_weight_type)
    : weights_{args.kd_alpha_ce, args.kd_beta_ce, args.kd_temp}, device_(args.device) {
  // Built and its weights made on the run's device, as the student's (train/trainer.cc): initialised on
  // the host and moved once, then the checkpoint read into host copies and moved (ckpt/checkpoint.h).
  std::optional<DefaultDeviceScope> on_device;
  on_device.emplace(device_);
  model_ = model::build_model_chunk(args.teacher_model, params_, tp, model::ModelChunk{});
  // Values only: nothing is ever backpropagated into the teacher.
  params_.allocate(args.seed, /*with_grads=*/false);
  on_device.reset();
  if (cached_weight_type != DType::F32) params_.cache_rounded_weights(cached_weight_type);  // rounded once
  iteration_ = ckpt::load_checkpoint(args.load_teacher, params_, nullptr).iteration;
}

model::Distillation Teacher::target(const model::MicroBatch& batch, const model::ForwardContext& ctx) const {
  // On the teacher's device whatever scope the caller is in (the trainer's step and evaluation are on
  // the same one): its activations and logits stay there, where the student's head reads them.
  DefaultDeviceScope on_device(device_);
  return {weights_, model_->logits(batch, ctx)};
}

}  // namespace tessera::train
