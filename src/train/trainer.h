// The training loop of `tessera train`: micro-batches accumulated into a global batch, AdamW with
// clipping and a learning-rate schedule, periodic evaluation, logging and checkpoints.
#pragma once

#include <memory>
#include <vector>

#include "model/gpt_model.h"
#include "optim/adamw_optimizer.h"
#include "train/arguments.h"
#include "train/mock_data.h"
#include "train/training_log.h"

namespace tessera::train {

class Trainer {
 public:
  // Builds the model and optimizer and resumes from --load when it holds a checkpoint.
  explicit Trainer(TrainArguments args);

  // Trains from the current iteration to --train-iters.
  void train();
  // Mean per-token loss over --eval-iters global batches of the validation split.
  double evaluate();

  int64_t iteration() const { return iteration_; }
  // The lm loss of every iteration this Trainer ran, in order.
  const std::vector<double>& losses() const { return losses_; }
  model::ParameterSet& parameters() { return params_; }

 private:
  // One forward/backward/step over a global batch; returns the mean per-token loss.
  double train_step(float lr, optim::StepResult& step);
  void save();

  TrainArguments args_;
  model::ParameterSet params_;
  std::unique_ptr<model::GptModel> model_;
  std::unique_ptr<optim::AdamWOptimizer> optimizer_;
  MockGptDataset train_data_, valid_data_;
  TrainingLog log_;
  int64_t iteration_ = 0, consumed_samples_ = 0, skipped_iterations_ = 0, nan_iterations_ = 0;
  std::vector<double> losses_;
};

}  // namespace tessera::train
