#include "train/trainer.h"

#include <cmath>
#include <iostream>

#include "ckpt/checkpoint.h"
#include "core/timer.h"

namespace tessera::train {
namespace {

nlohmann::json arguments_json(const TrainArguments& a) {
  const model::GptConfig& c = a.model;
  return {{"num_layers", c.num_layers},
          {"hidden_size", c.hidden_size},
          {"num_attention_heads", c.num_attention_heads},
          {"num_query_groups", c.num_query_groups},
          {"kv_channels", c.kv_channels},
          {"ffn_hidden_size", c.ffn_hidden_size},
          {"seq_length", c.seq_length},
          {"max_position_embeddings", c.max_position_embeddings},
          {"padded_vocab_size", c.padded_vocab_size},
          {"position_embedding_type", a.position_embedding_type},
          {"normalization", a.normalization},
          {"swiglu", c.swiglu},
          {"untie_embeddings_and_output_weights", c.untie_embeddings_and_output_weights},
          {"add_bias_linear", c.add_bias_linear},
          {"micro_batch_size", a.micro_batch_size},
          {"global_batch_size", a.global_batch_size},
          {"train_iters", a.train_iters},
          {"lr", a.lr},
          {"seed", a.seed}};
}

}  // namespace

Trainer::Trainer(TrainArguments args)
    : args_(std::move(args)),
      train_data_(args_.vocab_size, args_.seq_length, args_.seed, Split::Train),
      valid_data_(args_.vocab_size, args_.seq_length, args_.seed, Split::Validation),
      log_(args_.log_dir, args_.tensorboard_dir) {
  model_ = std::make_unique<model::GptModel>(args_.model, params_);
  params_.allocate(args_.seed);
  optimizer_ = std::make_unique<optim::AdamWOptimizer>(params_, args_.adam);
  log_.print(str_cat(" > number of parameters on (tensor, pipeline) model parallel rank (0, 0): ", params_.numel()));

  if (!args_.load.empty() && ckpt::latest_checkpointed_iteration(args_.load) >= 0) {
    bool load_optim = !args_.no_load_optim && !args_.finetune;
    ckpt::TrainingState state = ckpt::load_checkpoint(args_.load, params_, load_optim ? optimizer_.get() : nullptr);
    if (!args_.finetune) {
      iteration_ = state.iteration;
      consumed_samples_ = state.consumed_train_samples;
      skipped_iterations_ = state.skipped_iterations;
      if (!args_.no_load_rng) args_.seed = state.seed;
    }
    log_.print(str_cat(" loaded checkpoint from ", args_.load, " at iteration ", state.iteration,
                       args_.finetune ? " (finetune: starting at iteration 0)" : ""));
  } else if (!args_.load.empty()) {
    log_.print(str_cat(" WARNING: no checkpoint in ", args_.load, "; training from random initialisation"));
  }
}

double Trainer::train_step(float lr, optim::StepResult& step) {
  const int64_t mbs = args_.micro_batch_size, seq = args_.seq_length;
  std::vector<model::MicroBatch> batches;
  double tokens = 0;
  for (int64_t m = 0; m < args_.num_micro_batches; ++m) {
    batches.push_back(train_data_.micro_batch(consumed_samples_ + m * mbs, mbs));
    const Tensor& mask = batches.back().loss_mask;
    for (int64_t i = 0; i < mask.numel(); ++i) tokens += mask.f32()[i];
  }
  // The objective is the mean loss over the global batch's tokens, so every micro-batch's gradient is
  // scaled by 1 / (tokens in the global batch): the sum over micro-batches (and, later, data-parallel
  // ranks) is then the gradient of the mean whatever the split.
  const float grad_scale = tokens > 0 ? static_cast<float>(1.0 / tokens) : 0.0f;
  params_.zero_grad();
  double loss_sum = 0;
  for (const model::MicroBatch& mb : batches) {
    model::ForwardContext ctx{args_.seed, iteration_ + 1, mb.sample_offset, true, seq, mbs};
    model::GptActivations rec;
    loss_sum += model_->forward(mb, ctx, rec);
    model_->backward(rec, ctx, grad_scale);
  }
  step = optimizer_->step(lr);
  return tokens > 0 ? loss_sum / tokens : 0.0;
}

double Trainer::evaluate() {
  const int64_t mbs = args_.micro_batch_size, seq = args_.seq_length;
  double loss_sum = 0, tokens = 0;
  // The same validation samples every time, so evaluations are comparable along a run.
  for (int64_t m = 0; m < args_.eval_iters * args_.num_micro_batches; ++m) {
    model::MicroBatch mb = valid_data_.micro_batch(m * mbs, mbs);
    model::ForwardContext ctx{args_.seed, iteration_, mb.sample_offset, false, seq, mbs};
    model::GptActivations rec;
    loss_sum += model_->forward(mb, ctx, rec);
    for (int64_t i = 0; i < mb.loss_mask.numel(); ++i) tokens += mb.loss_mask.f32()[i];
  }
  return tokens > 0 ? loss_sum / tokens : 0.0;
}

void Trainer::save() {
  ckpt::TrainingState state{iteration_, consumed_samples_, skipped_iterations_, args_.seed, arguments_json(args_)};
  Timer t;
  ckpt::save_checkpoint(args_.save, state, params_, optimizer_.get());
  log_.print(str_cat(" saved checkpoint at iteration ", iteration_, " to ", args_.save, " (",
                     static_cast<int>(t.seconds() * 1000), " ms)"));
}

void Trainer::train() {
  const double flops_per_iteration = model::model_flops_per_iteration(args_.model, args_.global_batch_size);
  Timer run_timer;
  const int64_t first_iteration = iteration_;
  double interval_loss = 0, interval_seconds = 0;  // training steps only, not evaluation or saving
  int64_t interval_iters = 0;
  while (iteration_ < args_.train_iters) {
    optim::StepResult step;
    float lr = args_.lr_schedule.lr(iteration_);
    Timer step_timer;
    double loss = train_step(lr, step);
    interval_seconds += step_timer.seconds();
    ++iteration_;
    consumed_samples_ += args_.global_batch_size;
    losses_.push_back(loss);
    if (step.skipped) ++skipped_iterations_;
    if (!std::isfinite(loss) || !std::isfinite(step.grad_norm)) ++nan_iterations_;
    interval_loss += loss;
    ++interval_iters;

    if (iteration_ % args_.log_interval == 0 || iteration_ == args_.train_iters) {
      double seconds = interval_seconds / static_cast<double>(interval_iters);
      IterationStats s;
      s.iteration = iteration_;
      s.train_iters = args_.train_iters;
      s.consumed_samples = consumed_samples_;
      s.global_batch_size = args_.global_batch_size;
      s.elapsed_ms_per_iteration = seconds * 1000;
      s.tflops_per_device = flops_per_iteration / seconds / 1e12;
      s.tokens_per_second = static_cast<double>(args_.global_batch_size * args_.seq_length) / seconds;
      s.learning_rate = lr;
      s.lm_loss = interval_loss / static_cast<double>(interval_iters);
      s.grad_norm = step.grad_norm;
      s.skipped_iterations = skipped_iterations_;
      s.nan_iterations = nan_iterations_;
      log_.iteration(s);
      interval_loss = 0;
      interval_iters = 0;
      interval_seconds = 0;
    }
    if (args_.eval_iters > 0 && (iteration_ % args_.eval_interval == 0 || iteration_ == args_.train_iters))
      log_.validation(iteration_, evaluate());
    if (!args_.save.empty() && ((args_.save_interval > 0 && iteration_ % args_.save_interval == 0) ||
                                iteration_ == args_.train_iters))
      save();
    log_.progress(iteration_, args_.train_iters,
                  run_timer.seconds() / static_cast<double>(iteration_ - first_iteration));
  }
}

}  // namespace tessera::train
