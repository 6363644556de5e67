// Evaluation: the validation and test splits' losses (and bits per byte), on the samples each split
// starts with, and the final evaluations after training.
#include <algorithm>
#include <cmath>
#include <span>

#include "data/text_bytes.h"
#include "train/step_context.h"
#include "train/trainer.h"

namespace tessera::train {

Evaluation Trainer::evaluate() {
  TESSERA_CHECK(valid_data_ != nullptr,
                args_.data_path.empty() ? std::string("no --valid-data-path")
                                        : str_cat("--split=", args_.split, ": no validation documents"),
                " to evaluate");
  return evaluate_on(*valid_data_);
}

std::vector<std::string> Trainer::auxiliary_loss_names() const {
  // (No chunks here where the step engine holds the model itself: its modules declare them.)
  std::vector<std::string> names = !chunks_.empty() ? chunks_.front()->auxiliary_loss_names()
                                   : engine_         ? engine_->auxiliary_loss_names()
                                                     : std::vector<std::string>();
  if (args_.kd) names.push_back(model::kDistillationLossName);
  return names;
}

std::vector<float> Trainer::auxiliary_values(const model::LossSums& sums) const {
  const std::vector<std::string> names = auxiliary_loss_names();
  std::vector<float> values(names.size(), 0.0f);
  for (const auto& [name, value] : sums.auxiliary) {
    auto at = std::find(names.begin(), names.end(), name);
    TESSERA_CHECK(at != names.end(), "the model added an auxiliary loss '", name, "' it does not declare");
    values[at - names.begin()] += static_cast<float>(value);
  }
  return values;
}

Evaluation Trainer::evaluate_on(const BatchSource& data) {
  optimizer_->wait_for_params();
  // The same samples every time, so evaluations are comparable along a run.
  std::vector<model::MicroBatch> batches;
  enum { kTokens, kBytes };
  std::vector<float> counts(2, 0.0f);
  for (int64_t m = 0; m < args_.eval_iters * args_.num_micro_batches; ++m) {
    batches.push_back(micro_batch(data, 0, m));
    const model::MicroBatch& b = batches.back();
    counts[kTokens] += static_cast<float>(loss_tokens(b));
    if (text_tokenizer_ && data.labels_are_text()) {
      const std::span<const float> mask(b.loss_mask.host_f32(), static_cast<size_t>(b.loss_mask.numel()));
      counts[kBytes] += static_cast<float>(data::text_bytes(
          *text_tokenizer_, std::span<const int32_t>(b.labels.host_i32(), mask.size()), mask));
    }
  }
  data_parallel_sum(counts);
  const double samples = static_cast<double>(args_.eval_iters * args_.global_batch_size);
  pipeline::PipelineTimes saved = times_;  // evaluation is not part of the training timers
  const model::LossSums sums = engine_->evaluate(batches, per_sample_loss_weight(counts[kTokens], samples));
  times_ = saved;
  std::vector<float> loss{static_cast<float>(sums.lm)};
  for (float v : auxiliary_values(sums)) loss.push_back(v);
  pipeline_sum(loss);
  context_parallel_sum(loss);
  data_parallel_sum(loss);
  Evaluation e;
  if (counts[kTokens] <= 0) return e;
  e.lm_loss = loss[0] / counts[kTokens];
  if (counts[kBytes] > 0) e.bits_per_byte = loss[0] / std::log(2.0) / counts[kBytes];
  const std::vector<std::string> names = auxiliary_loss_names();
  for (size_t i = 0; i < names.size(); ++i) e.auxiliary.emplace_back(names[i], loss[1 + i] / counts[kTokens]);
  return e;
}

void Trainer::evaluate_after_training() {
  if (args_.eval_iters == 0) return;
  // Megatron evaluates the validation split after training too; here the loop's evaluation at the last
  // iteration is that one, so only a run whose loop did not run (--skip-train, or nothing left) evaluates it here.
  if ((args_.skip_train || nothing_left_to_train_) && valid_data_) {
    const Evaluation e = evaluate_on(*valid_data_);
    if (log_) log_->final_evaluation(iteration_, "validation", e);
  }
  if (test_data_) {
    const Evaluation e = evaluate_on(*test_data_);
    if (log_) log_->final_evaluation(iteration_, "test", e);
  }
}

}  // namespace tessera::train
