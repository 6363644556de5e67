#include "train/trainer.h"

#include "train/training_data.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <utility>

#include "ckpt/checkpoint.h"
#include "data/tokenizer_factory.h"
#include "core/process_memory.h"
#include "core/profiler.h"
#include "core/timer.h"
#include "kernels/gemm.h"
#include "kernels/precision.h"
#include "model/context_parallel_chunk.h"
#include "model/token_sliced_chunk.h"
#include "kernels/tensor_ops.h"
#include "train/device_setup.h"
#include "train/exit_signal.h"
#include "train/expert_bias.h"
#include "train/fault_injection.h"
#include "train/step_context.h"
#include "train/args/megatron_compat_flags.h"

namespace tessera::train {

Trainer::Trainer(TrainArguments args, comm::ProcessGroup* world)
    : args_(std::move(args)), injected_fault_(injected_fault_from_environment()) {
  // First of all, so that a preemption while the datasets are built or a checkpoint loads is not lost:
  // the flag is acted on at the end of the first iteration.
  if (args_.exit_signal_handler) install_exit_signal_handler(exit_signal_number(args_.exit_signal));
  if (world == nullptr) {
    single_world_ = comm::make_single_process_group("world");
    world = single_world_.get();
  }
  TESSERA_CHECK(world->size() == args_.world_size, "the job has ", world->size(), " ranks but the arguments were "
                "checked for ", args_.world_size);
  prepare_save_directories(world->rank());
  comm::ParallelLayout layout{world->size(), static_cast<int>(args_.tensor_model_parallel_size),
                              static_cast<int>(args_.pipeline_model_parallel_size)};
  layout.context_parallel_size = static_cast<int>(args_.context_parallel_size);
  layout.expert_model_parallel_size = static_cast<int>(args_.expert_model_parallel_size);
  if (args_.expert_tensor_parallel_size > 0)
    layout.expert_tensor_parallel_size = static_cast<int>(args_.expert_tensor_parallel_size);
  world_ = world;
  state_ = std::make_unique<comm::ParallelState>(*world, layout);
  experts_ = {&state_->expert_model_group(), &state_->expert_tensor_group(), &state_->expert_tensor_model_group(),
              args_.moe_token_dispatcher_type == "allgather" ? parallel::TokenDispatcher::AllGather
                                                              : parallel::TokenDispatcher::AllToAll};
  tp_ = {&state_->tensor_group(), args_.sequence_parallel, &experts_};
  cp_ = {&state_->context_group(), &ring_wait_seconds_};
  if (state_->world_rank() == 0) {
    log_ = std::make_unique<TrainingLog>(args_.log_dir, args_.tensorboard_dir);
    if (world->size() > 1) say(state_->describe());
    // Said once, at start-up, so that a user who relies on the handler learns before losing a run.
    if (args_.exit_signal_handler) {
      const std::string warning = exit_signal_launcher_warning(exit_signal_number(args_.exit_signal),
                                                               [](const char* n) { return std::getenv(n); });
      if (!warning.empty()) say(warning);
    }
  }
  say(device_line(args_));
  if (const std::string note = megatron_compat_note(args_.megatron_compat_flags); !note.empty()) say(note);
  prepare_device(args_.device);

  build_datasets();
  // Megatron's lines for sample-based training and the batch-size ramp.
  if (args_.train_samples > 0) say(str_cat("setting training iterations to ", args_.train_iters));
  if (const auto& r = args_.batch_schedule.rampup(); r && args_.batch_schedule.ramps())
    say(str_cat("will use batch size rampup starting from global batch size ", r->start, " to global batch size ",
                args_.global_batch_size, " with batch size increments ", r->increment, " over ", r->samples,
                " samples."));
  if (!args_.step_batch_size_schedule.empty()) {  // Megatron's line, then its calculator's table (in samples)
    say(str_cat("> using step batch size schedule: ", args_.step_batch_size_schedule));
    const int64_t per_micro_batch = args_.micro_batch_size * args_.data_parallel_size();
    for (const BatchSizeStep& s : args_.batch_schedule.steps())
      say(str_cat("  >= ", s.threshold * args_.model.seq_length, " tokens (", s.threshold, " samples) -> batch_size=",
                  s.size, ", num_microbatches=", s.size / per_micro_batch));
  }
  // This rank's chunks of the model: Megatron's layer ranges for (pipeline rank, virtual stage).
  const int stage = state_->coordinates().pp;
  // Token slices flow through the stages one by one (TeraPipe) when there is a pipeline; on one stage the
  // chunk runs a micro-batch's slices one after another in a single forward (model/token_sliced_chunk.h).
  const bool slices_in_schedule = !args_.token_slices.empty() && args_.pipeline_model_parallel_size > 1;
  schedule_ = schedule_shape(args_, args_.num_micro_batches);
  if (slices_in_schedule) schedule_.slices = static_cast<int>(args_.token_slices.size());
  pipeline::validate_schedule(schedule_);
  // Where the step engine builds this rank's part of the model itself (not in pipeline stages),
  // params_ and chunks_ stay empty (train/step_engine.h).
  const bool engine_model = engine_holds_model(args_);
  if (!engine_model) pipeline::validate_layer_split(args_.layer_split, schedule_);
  // The model, its parameters (initialised on the host, moved once) and the optimizer's moments on the
  // device: what is made from here to the rounded weights names no device. Released before the
  // checkpoint loads, which reads into host tensors of its own.
  if (args_.layer_split.uneven() || args_.layer_split.accounts()) {  // said once: the flags' split
    std::string counts;
    for (int s = 0; s < schedule_.stages; ++s)
      counts += str_cat(s ? " " : "", pipeline::stage_layer_count(args_.layer_split, schedule_.stages, s));
    say(str_cat(" > layers per pipeline stage: ", counts,
                args_.layer_split.uneven() ? " (uneven: --decoder-first/last-pipeline-num-layers)"
                                           : " (the embedding and/or the loss counted as a layer: "
                                             "--account-for-embedding/loss-in-pipeline-split)"));
  }
  std::optional<DefaultDeviceScope> on_device;
  on_device.emplace(args_.device);
  for (int k = 0; k < (engine_model ? 0 : schedule_.chunks); ++k) {
    pipeline::LayerRange layers = pipeline::chunk_layers(args_.layer_split, schedule_, {stage, k});
    model::ModelChunk chunk{layers.first, layers.count, pipeline::is_first_chunk(schedule_, {stage, k}),
                            pipeline::is_last_chunk(schedule_, {stage, k})};
    std::unique_ptr<model::LanguageModelChunk> built = model::build_model_chunk(args_.model, params_, tp_, chunk);
    // --pipeline-token-slices: each micro-batch runs slice by slice with per-layer key/value caches.
    if (!args_.token_slices.empty()) {
      std::unique_ptr<model::TokenSlicedChunk> sliced = model::with_token_slices(std::move(built), args_.token_slices);
      if (slices_in_schedule) sliced_chunks_.push_back(sliced.get());
      built = std::move(sliced);
    }
    // --context-parallel-size: this rank's two chunks of each sequence, attention around the ring.
    built = model::with_context_parallel(std::move(built), cp_);
    chunks_.push_back(std::move(built));
    chunks_.back()->set_recompute(args_.recompute);
  }
  if (!args_.token_slices.empty()) {
    std::string lengths;
    for (int64_t l : args_.token_slices) lengths += str_cat(lengths.empty() ? "" : ",", l);
    const std::string how = slices_in_schedule
                                ? str_cat("pipelined over ", schedule_.stages, " stages (1F1B over the slices)")
                                : std::string("run one after another");
    if (args_.pipeline_token_slices == "auto")  // the chosen slices first, then whose costs chose them
      say(str_cat(" > token slices (auto): ", lengths, " (TeraPipe's dynamic program, costs from ",
                  args_.token_slices_source, "), ", how));
    else
      say(str_cat(" > token slices (TeraPipe, --pipeline-token-slices ", args_.pipeline_token_slices, "): ",
                  args_.token_slices.size(), " slices of [", lengths, "] tokens, ", how));
  }
  if (schedule_.zero_bubble != pipeline::ZeroBubble::Off)
    say(str_cat(" > zero-bubble pipeline (", schedule_.zero_bubble == pipeline::ZeroBubble::V
                    ? str_cat("ZB-V: rank r holds model chunks r and ", 2 * schedule_.stages - 1, " - r")
                    : std::string("ZB-H1"),
                "): backward split into B (input gradients) and W (weight gradients), W filling the bubble; "
                "bubble with F = B = W: ", str_cat(100 * pipeline::theoretical_bubble_fraction(schedule_)), " %"));
  if (cp_.size() > 1)
    say(str_cat(" > context parallelism: each sequence of ", args_.model.seq_length, " tokens in ", 2 * cp_.size(),
                " chunks of ", parallel::context_parallel_chunk_length(args_.model.seq_length, cp_.size()),
                ", rank i of the ", cp_.size(), " holding chunks i and ", 2 * cp_.size() - 1,
                " - i; ring attention (p2p)"));
  params_.allocate(args_.seed);
  if (schedule_.stages > 1 && !engine_model) {
    // The activation that crosses a stage boundary: a micro-batch's, or with token slices each slice's;
    // under context parallelism this rank's two chunks of it (seq / cp tokens per sample).
    std::vector<Shape> activations;
    const int64_t local_seq = args_.model.seq_length / cp_.size();
    for (int64_t tokens : schedule_.slices > 1 ? args_.token_slices : std::vector<int64_t>{local_seq})
      activations.push_back(
          {tokens * args_.micro_batch_size / (tp_.sequence_parallel ? tp_.size() : 1), args_.model.hidden_size});
    p2p_ = std::make_unique<pipeline::PipelineP2P>(state_->pipeline_group(), schedule_, std::move(activations),
                                                   tp_.sequence_parallel ? nullptr : tp_.group);
  }
  comm::RankCoordinates rc = state_->coordinates();
  // One set of gradient buckets per data-parallel group that reduces parameters (dense: data x context;
  // expert: expert data), each group's parameters being what their specs say.
  buckets_ = std::make_unique<GroupedGradBuckets>(params_, *state_, args_.ddp_bucket_size,
                                                  args_.use_distributed_optimizer, args_.model.moe.total_experts() > 0);
  if (args_.use_distributed_optimizer) {
    auto distributed = std::make_unique<optim::DistributedOptimizer>(params_, args_.adam, buckets_->optimizer_groups(),
                                                                     args_.overlap_param_gather);
    distributed_optimizer_ = distributed.get();
    optimizer_ = std::move(distributed);
  } else {
    // Dense gradients' norm over tensor x pipeline, expert ones' over expert tensor x expert x pipeline.
    optimizer_ = std::make_unique<optim::AdamWOptimizer>(params_, args_.adam, &state_->model_parallel_group(),
                                                         rc.tp == 0, &state_->expert_tensor_model_pipeline_group(),
                                                         rc.etp == 0);
  }
  say(str_cat(" > number of parameters on (tensor, pipeline) model parallel rank (", rc.tp, ", ", rc.pp,
              "): ", params_.numel()));
  engine_ = make_step_engine(args_, {state_.get(), &tp_, &params_, make_schedule_engine()});
  for (const std::string& line : engine_->describe()) say(line);
  // Mixed precision on the fp32 kernels: each GEMM weight is rounded once per step, not in every GEMM. On a
  // GPU too, as bench_gpu_train runs it (the configuration scripts/gpu_check.sh has checked).
  const DType gemm_type = args_.model.params_dtype;
  const bool on_gpu = args_.device.type == DeviceType::CUDA;
  if (gemm_type != DType::F32 &&
      (on_gpu || (!kernels::GemmBackend::for_device(Device::cpu()).native_16bit(gemm_type) &&
                  kernels::reuse_rounded_inputs())))
    params_.cache_rounded_weights(gemm_type);
  on_device.reset();
  memory_ = predict_memory(args_, schedule_, stage, params_.numel());
  if (params_.rounded_value_type() != DType::F32) {
    // 2-byte copies on a GPU (cuBLASLt's 16-bit inputs), fp32 ones on the CPU.
    memory_.rounded_weights_type = kernels::gemm_buffer_type(params_.rounded_value_type(), args_.device);
    memory_.rounded_weights = static_cast<double>(params_.gemm_weight_bytes(memory_.rounded_weights_type));
    memory_.weight_and_optimizer += memory_.rounded_weights;
  }
  say(memory_report(args_, memory_));
  say(str_cat(" > optimizer state bytes on rank 0: ", optimizer_->state_bytes(),
              args_.use_distributed_optimizer ? str_cat(" (distributed over ", args_.data_parallel_size(),
                                                        " data-parallel ranks)") : std::string()));
  if (args_.loss_scaler) loss_scaler_.emplace(*args_.loss_scaler);
  if (args_.bf16 || args_.fp16) say(mixed_precision_summary(args_));

  resume();
  build_teacher();
  make_rerun_state_machine();
}




void Trainer::say(const std::string& line) {
  if (log_) log_->print(line);
}

namespace {

void group_sum(comm::ProcessGroup& group, std::vector<float>& values) {
  if (group.size() == 1) return;
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::F32, Device::cpu());  // host values
  std::copy(values.begin(), values.end(), t.host_f32());
  group.all_reduce(t);
  std::copy(t.host_f32(), t.host_f32() + t.numel(), values.begin());
}

}  // namespace

void Trainer::data_parallel_sum(std::vector<float>& values) const { group_sum(state_->data_group(), values); }
void Trainer::pipeline_sum(std::vector<float>& values) const { group_sum(state_->pipeline_group(), values); }
void Trainer::context_parallel_sum(std::vector<float>& values) const { group_sum(state_->context_group(), values); }

double Trainer::train_step(float lr, int64_t global_batch, optim::StepResult& step) {
  TESSERA_PROFILE_SCOPE("train_step");
  const int64_t micro_batches = global_batch / (args_.micro_batch_size * args_.data_parallel_size());
  std::vector<model::MicroBatch> batches;
  for (int64_t m = 0; m < micro_batches; ++m) batches.push_back(next_micro_batch(m));
  std::vector<float> global_tokens{static_cast<float>(loss_tokens(batches))};  // of the whole global batch
  data_parallel_sum(global_tokens);
  const double tokens = global_tokens[0];
  const StepOutcome out = engine_->step({batches, global_batch, tokens}, lr);
  step = out.optimizer;
  const std::vector<std::string> names = auxiliary_loss_names();
  TESSERA_CHECK(out.auxiliary_sums.size() == names.size(), "the step gave ", out.auxiliary_sums.size(),
                " auxiliary losses, the model declares ", names.size());
  for (size_t i = 0; i < names.size(); ++i)
    auxiliary_loss_history_[names[i]].push_back(mean_loss(out.auxiliary_sums[i], tokens));
  return mean_loss(out.lm_loss_sum, tokens);
}

StepOutcome Trainer::schedule_step(const GlobalBatch& batch, float lr) {
  // The previous step's parameter all-gather: with --overlap-param-gather the forward waits for it bucket
  // by bucket (run_micro_batches), otherwise it is already complete.
  // Loss scaling multiplies the backward seed; the optimizer divides the gradients by it again.
  const float loss_scale = loss_scaler_ ? loss_scaler_->scale() : 1.0f;
  model::LossSums sums;
  // Where nothing checks the loss before the update, a GPU's sums are read after the optimizer's launches
  // are queued: the step then waits for the device once, for the norm (AdamWOptimizer::step), and the
  // sums' copy follows it. The same values either way: only when they are read moves.
  const bool read_after_update = loss_unchecked_before_update();
  // Until the rerun machine's checks pass, nothing but the gradients changes: a failed check re-runs the
  // step from the same state on the same micro-batches (train/rerun_state_machine.h, trainer_rerun.cc).
  for (rerun_->begin_iteration(iteration_ + 1);;) {
    params_.zero_grad();
    sums = run_micro_batches(batch.micro_batches, true, gradient_scale(batch.loss_tokens) * loss_scale,
                             per_sample_loss_weight(batch.loss_tokens, static_cast<double>(batch.samples)),
                             /*settle=*/!read_after_update);
    optimizer_->wait_for_params();  // any bucket no forward used
    for (int64_t at : args_.inject_nan_at_iterations)
      if (at == iteration_ + 1)  // through a transfer: the gradients may be on a GPU
        kernels::transfer(params_.grads().flat_range(0, 1), kernels::scalar_tensor(std::nan(""), Device::cpu()));
    Timer reduce;
    finalize_gradients();
    reduce_seconds_ += reduce.seconds();
    // The checks look at this rank's own loss (none to look at: after the update, below).
    if (read_after_update || rerun_accepts(sums, loss_tokens(batch.micro_batches))) break;
  }
  interval_routing_.add(sums.routing);
  if (args_.model.moe.expert_bias)  // as Megatron's finalize_model_grads: once per global batch, before the step
    update_expert_biases(params_, sums.routing.kept, args_.model.moe.total_experts(),
                         {&state_->data_context_group(), tp_.sequence_parallel ? &state_->tensor_group() : nullptr},
                         args_.moe_router_bias_update_rate);
  Timer optimizer;
  StepOutcome out;
  {
    DefaultDeviceScope on_device(args_.device);  // what the step makes (it reads back only the norm)
    out.optimizer = optimizer_->step(lr, loss_scale);
  }
  optimizer_seconds_ += optimizer.seconds();
  if (read_after_update) {
    sums.settle();
    // The machine still sees every loss (it keeps the first ones for a later spiky-loss check, and its
    // ranks agree on the flags), but with nothing to check it accepts.
    TESSERA_CHECK(rerun_accepts(sums, loss_tokens(batch.micro_batches)), "iteration ", iteration_ + 1,
                  ": the rerun machine, with nothing to check, did not accept the step");
  }
  // The LM loss, then the model's auxiliary losses in the order of its names.
  std::vector<float> loss{static_cast<float>(sums.lm)};
  for (float v : auxiliary_values(sums)) loss.push_back(v);
  pipeline_sum(loss);
  context_parallel_sum(loss);
  data_parallel_sum(loss);
  out.lm_loss_sum = loss[0];
  out.auxiliary_sums.assign(loss.begin() + 1, loss.end());
  return out;
}

void Trainer::finalize_gradients() {
  buckets_->finish();
  // Norm weights (and other replicated parameters) computed on sequence shards, or on a rank's own heads
  // (--qk-layernorm), hold partial gradients.
  if (tp_.size() > 1)
    for (const model::Parameter& p : params_.params())
      if (p.spec.sequence_parallel_grad) tp_.group->all_reduce(p.grad);
  // The first and last pipeline stages each hold the tied word embedding: sum their gradients.
  if (comm::ProcessGroup* embedding = state_->embedding_group())
    for (const model::Parameter& p : params_.params())
      if (p.spec.shared_with_last_stage) embedding->all_reduce(p.grad);
}


ExpertLoad Trainer::interval_expert_load() {
  // Every stage's layers and every data-parallel rank's tokens, every context-parallel rank's chunks;
  // under sequence parallelism also every tensor rank's sequence shard (without it the tensor ranks
  // route the same tokens).
  model::LossSums::Routing& r = interval_routing_;
  r.routed.resize(static_cast<size_t>(args_.model.moe.total_experts()), 0.0);
  std::vector<float> counts(r.routed.begin(), r.routed.end());
  counts.push_back(static_cast<float>(r.dropped));
  counts.push_back(static_cast<float>(r.entries));
  pipeline_sum(counts);
  data_parallel_sum(counts);
  context_parallel_sum(counts);
  if (tp_.sequence_parallel) group_sum(state_->tensor_group(), counts);
  model::LossSums::Routing total;
  total.routed.assign(counts.begin(), counts.end() - 2);
  total.dropped = counts[counts.size() - 2];
  total.entries = counts.back();
  r = model::LossSums::Routing();
  return expert_load(args_.model.moe, total);
}







void Trainer::train() {
  Timer run_timer;
  const int64_t first_iteration = iteration_;
  double interval_loss = 0, interval_seconds = 0;  // training steps only, not evaluation or saving
  // Megatron's log line counts skipped and NaN iterations per interval.
  int64_t interval_iters = 0, interval_skipped = 0, interval_nan = 0;
  if (args_.skip_train) {
    say("skipping training (--skip-train is on) ...");
    return;
  }
  if (iteration_ >= args_.train_iters) {  // as Megatron: no iteration, but the evaluation after training
    say(str_cat(" > nothing left to train: the checkpoint is at iteration ", iteration_, " of --train-iters ",
                args_.train_iters, " (raise --train-iters to train further)"));
    nothing_left_to_train_ = true;
    return;
  }
  while (iteration_ < args_.train_iters) {
    if (iteration_ == first_iteration + 1) profiler::reset();  // TESSERA_PROFILE: leave out the warm-up step
    optim::StepResult step;
    const int64_t global_batch = current_global_batch();
    // As Megatron, the schedule advances only with updates that were made: in iterations, or in samples
    // under --train-samples.
    const int64_t schedule_steps =
        args_.train_samples > 0 ? consumed_samples_ - skipped_samples_ : iteration_ - skipped_iterations_;
    float lr = args_.lr_schedule.lr(schedule_steps);
    if (args_.weight_decay_schedule.varies())
      optimizer_->set_weight_decay(args_.weight_decay_schedule.wd(schedule_steps));
    const float loss_scale = loss_scaler_ ? loss_scaler_->scale() : 1.0f;
    Timer step_timer;
    double loss = train_step(lr, global_batch, step);
    interval_seconds += step_timer.seconds();
    ++iteration_;
    consumed_samples_ += global_batch;
    losses_.push_back(loss);
    if (step.skipped) {
      ++skipped_iterations_;
      skipped_samples_ += global_batch;
      ++interval_skipped;
    }
    // Under loss scaling, scaled gradients that overflow are expected now and then: the step is skipped
    // and the scale backs off. That is not a NaN iteration, unless the loss itself is not finite or the
    // scale cannot back off any further.
    const bool overflow =
        loss_scaler_ && step.skipped && std::isfinite(loss) && loss_scale > args_.loss_scaler->min_scale;
    if (loss_scaler_) loss_scaler_->update(step.skipped);
    if (overflow) {
      say(str_cat(" iteration ", iteration_, ": gradients overflowed at loss scale ", scale_str(loss_scale),
                  "; the update was skipped and the loss scale is now ", scale_str(loss_scaler_->scale())));
    } else if (!std::isfinite(loss) || !std::isfinite(step.grad_norm)) {
      // Every rank sees the same (reduced) loss and norm, so all stop together.
      ++interval_nan;
      ++consecutive_nan_iterations_;
      say(str_cat(" WARNING: iteration ", iteration_, ": lm loss ", loss, ", grad norm ", step.grad_norm,
                  step.skipped ? "; the update was skipped" : ""));
      TESSERA_CHECK(consecutive_nan_iterations_ < args_.max_nan_iterations, "training stopped at iteration ",
                    iteration_, ": ", consecutive_nan_iterations_, " consecutive iterations with a non-finite loss "
                    "or gradient norm (--max-nan-iterations=", args_.max_nan_iterations, ")");
    } else {
      consecutive_nan_iterations_ = 0;
    }
    interval_loss += loss;
    ++interval_iters;

    if (iteration_ % args_.log_interval == 0 || iteration_ == args_.train_iters) {
      double seconds = interval_seconds / static_cast<double>(interval_iters);
      IterationStats s;
      s.iteration = iteration_;
      s.train_iters = args_.train_iters;
      s.consumed_samples = consumed_samples_;
      s.global_batch_size = global_batch;  // Megatron's: the ramp's current size
      s.elapsed_ms_per_iteration = seconds * 1000;
      s.tflops_per_device = model::model_flops_per_iteration(args_.model, global_batch) / seconds / 1e12 /
                            static_cast<double>(args_.world_size);
      s.tokens_per_second = static_cast<double>(global_batch * args_.model.seq_length) / seconds;
      s.learning_rate = lr;
      s.loss_scale = loss_scaler_ ? loss_scaler_->scale() : 1.0;
      s.lm_loss = interval_loss / static_cast<double>(interval_iters);
      for (const std::string& name : auxiliary_loss_names()) {  // the interval's mean, as lm loss
        const std::vector<double>& values = auxiliary_loss_history_.at(name);
        double sum = 0;
        for (size_t i = values.size() - static_cast<size_t>(interval_iters); i < values.size(); ++i) sum += values[i];
        s.auxiliary_losses.emplace_back(name, sum / static_cast<double>(interval_iters));
      }
      if (args_.model.moe.enabled()) s.expert_load = interval_expert_load();
      s.grad_norm = step.grad_norm;
      if (args_.log_params_norm) {  // every rank: the norm sums over the model's ranks
        optimizer_->wait_for_params();
        s.params_norm = optimizer_->params_norm();
      }
      s.skipped_iterations = interval_skipped;
      s.nan_iterations = interval_nan;
      if (log_) log_->iteration(s);
      if (args_.log_straggler && !args_.disable_straggler_on_startup)
        log_stragglers(interval_seconds, interval_iters);
      log_timers(interval_iters);
      if (log_ && first_interval_note) say(std::exchange(first_interval_note, nullptr)(s.elapsed_ms_per_iteration));
      interval_loss = 0;
      interval_iters = interval_skipped = interval_nan = 0;
      interval_seconds = 0;
    }
    if (args_.kd && iteration_ == args_.kd_stop_iteration) {
      teacher_.reset();  // staged KD: from the next iteration on the LM loss alone, and the memory back
      say(str_cat(" > knowledge distillation stopped after iteration ", iteration_,
                  " (--kd-stop-iteration): training on the LM loss alone"));
    }
    if (valid_data_ && args_.eval_iters > 0 &&
        (iteration_ % args_.eval_interval == 0 || iteration_ == args_.train_iters))
    {
      const Evaluation e = evaluate();
      if (log_) log_->validation(iteration_, e);
    }
    if (args_.sample_interval > 0 && iteration_ % args_.sample_interval == 0) {
      optimizer_->wait_for_params();  // the sampler reads the weights
      params_.weights_changed();      // and its GEMMs may read their rounded copies
      if (!sampler_)
        sampler_ = std::make_unique<infer::TrainingSampler>(*chunks_[0], params_, tp_, tokenizer_options(args_),
                                                            args_.sample_prompt);
      say(str_cat(" sample at iteration ", iteration_, ": ", args_.sample_prompt, sampler_->sample()));
    }
    // --async-save: a save being written is finalised at the first step boundary where every rank's files
    // are complete (Megatron's maybe_finalize_async_save); a failed write ends every rank here.
    if (pending_save_) finish_pending_save(/*blocking=*/false);
    const bool save_now = !args_.save.empty() && ((args_.save_interval > 0 && iteration_ % args_.save_interval == 0) ||
                                                  iteration_ == args_.train_iters);
    if (save_now) {
      save();
    } else if (args_.non_persistent_save_interval > 0 && iteration_ % args_.non_persistent_save_interval == 0) {
      // As Megatron: a persistent save due at the same iteration takes its place.
      save(args_.non_persistent_ckpt_type == "local" ? SaveKind::NonPersistentLocal : SaveKind::NonPersistentGlobal);
    }
    if (log_)
      log_->progress(iteration_, args_.train_iters,
                     run_timer.seconds() / static_cast<double>(iteration_ - first_iteration));
    // Every rank stops after the same iteration when any of them was signalled.
    if (args_.exit_signal_handler && exit_signal_received_anywhere(*world_)) {
      if (!args_.save.empty() && !save_now) save();
      say(str_cat("exiting program after receiving ", exit_signal_name(), "."));
      exit_condition_met_ = true;
      break;
    }
    if (exit_by_interval_or_duration(save_now)) {
      exit_condition_met_ = true;
      break;
    }
  }
  finish_pending_save(/*blocking=*/true);  // the end of training (or an exit) waits for the last save
  optimizer_->wait_for_params();
}

bool Trainer::exit_by_interval_or_duration(bool saved) {
  const auto save_and_say = [&](const std::string& what) {
    if (!args_.save.empty() && !saved) save();
    world_->barrier();  // as Megatron's print_datetime: the line comes when every rank is there
    say(format_datetime_line(what));
  };
  if (args_.exit_duration_in_mins > 0) {
    // Clocks differ between ranks: all take the largest elapsed time, so they stop after the same iteration.
    Tensor minutes = Tensor::zeros({1}, DType::F32, Device::cpu());
    minutes.host_f32()[0] = static_cast<float>(start_timer_.seconds() / 60.0);
    if (world_->size() > 1) world_->all_reduce(minutes, comm::ReduceOp::Max);
    if (minutes.host_f32()[0] > args_.exit_duration_in_mins) {
      save_and_say(str_cat("exiting program after ", minutes.host_f32()[0], " minutes"));
      return true;
    }
  }
  if (args_.exit_interval > 0 && iteration_ % args_.exit_interval == 0) {
    save_and_say(str_cat("exiting program at iteration ", iteration_));
    return true;
  }
  return false;
}


}  // namespace tessera::train
