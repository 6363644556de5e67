#include "train/trainer.h"

#include <cmath>
#include <iostream>

#include "ckpt/checkpoint.h"
#include "core/timer.h"

namespace tessera::train {
namespace {

// What a checkpoint records about the run: the model (enough to rebuild it for generation) and the
// data and training settings.
nlohmann::json arguments_json(const TrainArguments& a) {
  return {{"model", model::to_json(a.model)},
          {"tokenizer_type", a.tokenizer_type},
          {"vocab_file", a.vocab_file},
          {"merge_file", a.merge_file},
          {"tokenizer_model", a.tokenizer_model},
          {"data_path", a.data_path},
          {"split", a.split},
          {"tensor_model_parallel_size", a.tensor_model_parallel_size},
          {"micro_batch_size", a.micro_batch_size},
          {"global_batch_size", a.global_batch_size},
          {"train_iters", a.train_iters},
          {"lr", a.lr},
          {"seed", a.seed}};
}

}  // namespace

Trainer::Trainer(TrainArguments args, comm::ProcessGroup* world)
    : args_(std::move(args)) {
  if (world == nullptr) {
    single_world_ = comm::make_single_process_group("world");
    world = single_world_.get();
  }
  TESSERA_CHECK(world->size() == args_.world_size, "the job has ", world->size(), " ranks but the arguments were "
                "checked for ", args_.world_size);
  comm::ParallelLayout layout{world->size(), static_cast<int>(args_.tensor_model_parallel_size),
                              static_cast<int>(args_.pipeline_model_parallel_size)};
  world_ = world;
  state_ = std::make_unique<comm::ParallelState>(*world, layout);
  tp_ = {&state_->tensor_group(), args_.sequence_parallel};
  if (state_->world_rank() == 0) {
    log_ = std::make_unique<TrainingLog>(args_.log_dir, args_.tensorboard_dir);
    if (world->size() > 1) say(state_->describe());
  }

  build_datasets();
  model_ = std::make_unique<model::GptModel>(args_.model, params_, tp_);
  params_.allocate(args_.seed);
  optimizer_ = std::make_unique<optim::AdamWOptimizer>(params_, args_.adam, &state_->model_parallel_group());
  buckets_ = std::make_unique<parallel::GradBuckets>(params_.grads(), args_.ddp_bucket_size, state_->data_group());
  comm::RankCoordinates rc = state_->coordinates();
  say(str_cat(" > number of parameters on (tensor, pipeline) model parallel rank (", rc.tp, ", ", rc.pp,
              "): ", params_.numel()));

  if (!args_.load.empty() && ckpt::latest_checkpointed_iteration(args_.load) >= 0) {
    bool load_optim = !args_.no_load_optim && !args_.finetune;
    ckpt::TrainingState state = ckpt::load_checkpoint(args_.load, params_, load_optim ? optimizer_.get() : nullptr);
    if (!args_.finetune) {
      iteration_ = state.iteration;
      consumed_samples_ = state.consumed_train_samples;
      skipped_iterations_ = state.skipped_iterations;
      if (!args_.no_load_rng) args_.seed = state.seed;
    }
    say(str_cat(" loaded checkpoint from ", args_.load, " at iteration ", state.iteration,
                args_.finetune ? " (finetune: starting at iteration 0)" : ""));
  } else if (!args_.load.empty()) {
    say(str_cat(" WARNING: no checkpoint in ", args_.load, "; training from random initialisation"));
  }
}

void Trainer::build_datasets() {
  batch_options_ = {args_.eod, args_.eod_mask_loss, args_.reset_position_ids, args_.reset_attention_mask};
  if (args_.mock_data) {
    train_data_ = std::make_shared<MockGptDataset>(args_.vocab_size, args_.seq_length, args_.seed, 0);
    valid_data_ = std::make_shared<MockGptDataset>(args_.vocab_size, args_.seq_length, args_.seed, 1);
    return;
  }
  data::GptDataConfig config;
  config.data_path = args_.data_path;
  config.split = args_.split;
  config.seq_length = args_.seq_length;
  config.seed = static_cast<uint32_t>(args_.seed);
  config.cache_path = args_.data_cache_path;
  auto sizes = data::megatron_num_samples(args_.train_iters, args_.global_batch_size, args_.eval_interval,
                                          args_.eval_iters);
  sizes[2] = 0;  // the test split is not used by training
  std::array<std::shared_ptr<const data::TokenDataset>, 3> sets;
  for (int turn = 0; turn < 2; ++turn) {  // rank 0 builds and caches; then the others load the cache
    if ((state_->world_rank() == 0) == (turn == 0)) sets = data::build_gpt_datasets(config, sizes);
    world_->barrier();
  }
  train_data_ = sets[0];
  valid_data_ = sets[1];
  TESSERA_CHECK(train_data_ != nullptr, "--split=", args_.split, ": gives the training split no documents");
  if (!valid_data_ && args_.eval_iters > 0) {
    say(str_cat(" WARNING: --split=", args_.split, " leaves no validation documents; evaluation is off"));
    args_.eval_iters = 0;
  }
  say(str_cat(" > datasets: ", train_data_->size(), " training samples", valid_data_ ? str_cat(", ", valid_data_->size(), " validation samples") : ""));
}

void Trainer::say(const std::string& line) {
  if (log_) log_->print(line);
}

model::MicroBatch Trainer::micro_batch(const data::TokenDataset& data, int64_t first, int64_t m) const {
  const int64_t mbs = args_.micro_batch_size;
  return make_micro_batch(data, first + (m * args_.data_parallel_size() + state_->coordinates().dp) * mbs, mbs,
                          batch_options_);
}

void Trainer::data_parallel_sum(std::vector<float>& values) const {
  comm::ProcessGroup& dp = state_->data_group();
  if (dp.size() == 1) return;
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())});
  std::copy(values.begin(), values.end(), t.f32());
  dp.all_reduce(t);
  std::copy(t.f32(), t.f32() + t.numel(), values.begin());
}

double Trainer::train_step(float lr, optim::StepResult& step) {
  const int64_t mbs = args_.micro_batch_size, seq = args_.seq_length;
  std::vector<model::MicroBatch> batches;
  std::vector<float> global_tokens(1, 0.0f);  // loss-counted tokens of the whole global batch
  for (int64_t m = 0; m < args_.num_micro_batches; ++m) {
    batches.push_back(micro_batch(*train_data_, consumed_samples_, m));
    const Tensor& mask = batches.back().loss_mask;
    for (int64_t i = 0; i < mask.numel(); ++i) global_tokens[0] += mask.f32()[i];
  }
  data_parallel_sum(global_tokens);
  const double tokens = global_tokens[0];
  // The objective is the mean loss over the global batch's tokens, so every micro-batch's gradient is
  // scaled by 1 / (tokens in the global batch): the sum over micro-batches (and, later, data-parallel
  // ranks) is then the gradient of the mean whatever the split.
  const float grad_scale = tokens > 0 ? static_cast<float>(1.0 / tokens) : 0.0f;
  params_.zero_grad();
  double loss_sum = 0;
  for (size_t m = 0; m < batches.size(); ++m) {
    const model::MicroBatch& mb = batches[m];
    model::ForwardContext ctx{args_.seed, iteration_ + 1, mb.sample_offset, true, seq, mbs};
    model::GptActivations rec;
    loss_sum += model_->forward(mb, ctx, rec);
    // During the last micro-batch's backward each gradient bucket can start its data-parallel
    // all-reduce as soon as it is final.
    bool overlap = args_.overlap_grad_reduce && m + 1 == batches.size();
    model_->backward(rec, ctx, grad_scale, overlap ? [this](int64_t first) { buckets_->mark_final_from(first); }
                                                   : std::function<void(int64_t)>());
  }
  finalize_gradients();
  step = optimizer_->step(lr);
  std::vector<float> loss{static_cast<float>(loss_sum)};
  data_parallel_sum(loss);
  return tokens > 0 ? loss[0] / tokens : 0.0;
}

void Trainer::finalize_gradients() {
  buckets_->finish();
  // Norm weights (and other replicated parameters) computed on sequence shards hold partial gradients.
  if (tp_.sequence_parallel && tp_.size() > 1)
    for (const model::Parameter& p : params_.params())
      if (p.spec.sequence_parallel_grad) tp_.group->all_reduce(p.grad);
}

double Trainer::evaluate() {
  const int64_t mbs = args_.micro_batch_size, seq = args_.seq_length;
  std::vector<float> loss_and_tokens(2, 0.0f);
  // The same validation samples every time, so evaluations are comparable along a run.
  for (int64_t m = 0; m < args_.eval_iters * args_.num_micro_batches; ++m) {
    model::MicroBatch mb = micro_batch(*valid_data_, 0, m);
    model::ForwardContext ctx{args_.seed, iteration_, mb.sample_offset, false, seq, mbs};
    model::GptActivations rec;
    loss_and_tokens[0] += static_cast<float>(model_->forward(mb, ctx, rec));
    for (int64_t i = 0; i < mb.loss_mask.numel(); ++i) loss_and_tokens[1] += mb.loss_mask.f32()[i];
  }
  data_parallel_sum(loss_and_tokens);
  return loss_and_tokens[1] > 0 ? loss_and_tokens[0] / loss_and_tokens[1] : 0.0;
}

void Trainer::save() {
  ckpt::TrainingState state{iteration_, consumed_samples_, skipped_iterations_, args_.seed, arguments_json(args_)};
  Timer t;
  comm::RankCoordinates rc = state_->coordinates();
  ckpt::save_checkpoint(args_.save, state, params_, optimizer_.get(), {rc.tp, rc.dp, world_});
  say(str_cat(" saved checkpoint at iteration ", iteration_, " to ", args_.save, " (",
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
      s.tflops_per_device = flops_per_iteration / seconds / 1e12 / static_cast<double>(args_.world_size);
      s.tokens_per_second = static_cast<double>(args_.global_batch_size * args_.seq_length) / seconds;
      s.learning_rate = lr;
      s.lm_loss = interval_loss / static_cast<double>(interval_iters);
      s.grad_norm = step.grad_norm;
      s.skipped_iterations = skipped_iterations_;
      s.nan_iterations = nan_iterations_;
      if (log_) log_->iteration(s);
      interval_loss = 0;
      interval_iters = 0;
      interval_seconds = 0;
    }
    if (args_.eval_iters > 0 && (iteration_ % args_.eval_interval == 0 || iteration_ == args_.train_iters))
    {
      double loss = evaluate();
      if (log_) log_->validation(iteration_, loss);
    }
    if (args_.sample_interval > 0 && iteration_ % args_.sample_interval == 0) {
      if (!sampler_)
        sampler_ = std::make_unique<infer::TrainingSampler>(
            *model_, params_, state_->tensor_group(), args_.sequence_parallel,
            data::TokenizerOptions{args_.tokenizer_type, args_.vocab_file, args_.merge_file, args_.tokenizer_model,
                                   args_.vocab_size},
            args_.sample_prompt);
      say(str_cat(" sample at iteration ", iteration_, ": ", args_.sample_prompt, sampler_->sample()));
    }
    if (!args_.save.empty() && ((args_.save_interval > 0 && iteration_ % args_.save_interval == 0) ||
                                iteration_ == args_.train_iters))
      save();
    if (log_)
      log_->progress(iteration_, args_.train_iters,
                     run_timer.seconds() / static_cast<double>(iteration_ - first_iteration));
  }
}

}  // namespace tessera::train
