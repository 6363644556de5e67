// Knowledge distillation's teacher (Megatron-DeepSpeed's --kd, DeepSpeed-MoE's Mixture-of-Students): a
// frozen model of its own configuration (TrainArguments::teacher_model: more layers, another width, an
// MoE with other experts, the same vocabulary), built whole on each rank that holds the student's LM
// head, over the student's tensor and expert groups, so that its logits come in the same vocabulary
// shard and rows as the student's. Under pipeline parallelism that is the last stage, which runs the
// teacher's whole forward beside the student's last chunk: no teacher activations cross stages. It has
// parameters but no gradients and no optimizer; it runs forward only, without dropout. It lives on the
// run's device (--device): on a GPU its weights, activations and logits stay there.
#pragma once

#include <memory>

#include "model/language_model.h"
#include "model/vocab_parallel_distillation.h"
#include "train/args/arguments.h"

namespace tessera::train {

class Teacher {
 public:
  // Builds the teacher and loads its weights from the latest checkpoint of args.load_teacher (resharded
  // to this layout). `tp` (the student's tensor and expert groups) must outlive it.
  Teacher(const TrainArguments& args, const parallel::TensorParallelContext& tp, DType cached_weight_type);

  // The teacher's logits of a micro-batch and the KD weights, for the student's head
  // (ForwardContext::distillation). ctx: the student's (its shape; the teacher never drops out).
  model::Distillation target(const model::MicroBatch& batch, const model::ForwardContext& ctx) const;

  int64_t iteration() const { return iteration_; }   // of the loaded checkpoint
  int64_t numel() const { return params_.numel(); }  // parameters on this rank

 private:
  model::ParameterSet params_;
  std::unique_ptr<model::LanguageModelChunk> model_;
  model::DistillationWeights weights_;
  Device device_;  // the run's (TrainArguments::device)
  int64_t iteration_ = 0;
};

// Whether an iteration's steps distil: iterations 1 .. --kd-stop-iteration (all with 0), counted by the
// iterations completed before it (`completed`); evaluation after iteration N counts as N's successor.
inline bool distilling(const TrainArguments& a, int64_t completed) {
  return a.kd && (a.kd_stop_iteration == 0 || completed < a.kd_stop_iteration);
}

}  // namespace tessera::train
