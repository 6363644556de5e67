#include "train/trainer.h"

#include "train/training_data.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "ckpt/checkpoint.h"
#include "data/text_bytes.h"
#include "data/tokenizer_factory.h"
#include "core/process_memory.h"
#include "core/profiler.h"
#include "core/timer.h"
#include "kernels/cpu_features.h"
#include "kernels/gemm.h"
#include "kernels/precision.h"
#include "model/context_parallel_chunk.h"
#include "model/token_slices.h"
#include "kernels/tensor_ops.h"
#include "train/device_setup.h"
#include "train/exit_signal.h"
#include "train/fault_injection.h"
#include "train/megatron_compat_flags.h"
#include "train/model_flags.h"

namespace tessera::train {
namespace {

// What a checkpoint records about the run: the model (enough to rebuild it for generation) and the
// data and training settings.
nlohmann::json arguments_json(const TrainArguments& a) {
  // The tokenizer's files as absolute paths, so the record means the same from any directory (the
  // checkpoint carries copies of them too: tokenizer_files below).
  const auto absolute = [](const std::string& p) { return p.empty() ? p : std::filesystem::absolute(p).string(); };
  return {{"model", model::to_json(a.model)},
          {"tokenizer_type", a.tokenizer_type},
          {"vocab_file", absolute(a.vocab_file)},
          {"merge_file", absolute(a.merge_file)},
          {"tokenizer_model", absolute(a.tokenizer_model)},
          {"data_path", a.data_path},
          {"split", a.split},
          {"tensor_model_parallel_size", a.tensor_model_parallel_size},
          {"pipeline_model_parallel_size", a.pipeline_model_parallel_size},
          {"virtual_pipeline_model_parallel_size", a.virtual_pipeline_size},
          {"context_parallel_size", a.context_parallel_size},
          {"pipeline_schedule", a.pipeline_schedule},
          {"micro_batch_size", a.micro_batch_size},
          {"global_batch_size", a.global_batch_size},
          {"train_iters", a.train_iters},
          {"lr", a.lr},
          {"seed", a.seed}};
}

// An Ouroboros checkpoint is the delayed rule's state of the layout that saved it (on P ranks it has no
// Megatron model files: the modules are not params_), so another pipeline or tensor size is refused by
// flag before any tensor is read, rather than as a tensor or file it lacks. The state files check the rest.
void check_ouroboros_layout(const nlohmann::json& saved, const TrainArguments& a) {
  struct Size {
    const char* key;  // in the checkpoint's arguments (arguments_json)
    const char* flag;
    int64_t here;
  };
  const Size sizes[] = {{"pipeline_model_parallel_size", "--pipeline-model-parallel-size", a.pipeline_model_parallel_size},
                        {"tensor_model_parallel_size", "--tensor-model-parallel-size", a.tensor_model_parallel_size}};
  for (const Size& s : sizes) {
    const int64_t was = saved.value(s.key, int64_t{1});
    TESSERA_CHECK(was == s.here, "--load ", a.load, ": the Ouroboros checkpoint was saved at ", s.flag, "=", was,
                  ", this run has ", s.flag, "=", s.here,
                  " (an Ouroboros run resumes only at the layout that saved it)");
  }
}

// A loss scale as Megatron's log line prints it ("4294967296.0").
std::string scale_str(float scale) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.1f", static_cast<double>(scale));
  return buf;
}

// The start-up line of a --bf16/--fp16 run: what is 16-bit, which CPU features decided the GEMM path
// and which path it is (on a GPU: cuBLASLt's), and the loss scale.
std::string mixed_precision_summary(const TrainArguments& a) {
  const DType t = a.model.params_dtype;
  const char* name = dtype_name(t);
  std::string where;
  if (a.device.type == DeviceType::CUDA) {
    where = str_cat("cuBLASLt on ", a.device.str(), ", the weights rounded to ", name, " once per step");
  } else {
    const kernels::CpuFeatures& cpu = kernels::cpu_features();
    const char* instructions = t == DType::BF16 ? "AVX512-BF16 or AMX-BF16" : "AVX512-FP16 or AMX-FP16";
    std::string path;
    if (kernels::GemmBackend::for_device(Device::cpu()).native_16bit(t))
      path = str_cat("native: oneDNN ", name, " kernels");
    else if (cpu.native_16bit(t))
      path = str_cat("this oneDNN has no ", name, " kernel for them, so rounded to ", name, " on the fp32 kernels");
    else
      path = str_cat("no ", instructions, ", so rounded to ", name, " on the fp32 kernels");
    where = str_cat("CPU features: ", cpu.str(), "; ", path);
  }
  std::string s = str_cat(" > mixed precision: ", name, " GEMM inputs with fp32 accumulation (", where,
                          "), fp32 master weights, gradients accumulated and all-reduced in fp32");
  if (!a.loss_scaler) return s;
  const optim::LossScalerConfig& c = *a.loss_scaler;
  if (!c.dynamic) return str_cat(s, ", constant loss scale ", scale_str(c.initial_scale));
  return str_cat(s, ", dynamic loss scale from ", scale_str(c.initial_scale), " (min ", scale_str(c.min_scale),
                 ", window ", c.window, ", hysteresis ", c.hysteresis, ")");
}

}  // namespace

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
  if (!args_.save.empty()) ckpt::prepare_save_directory(args_.save);  // on every rank: each writes its files
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
  // This rank's chunks of the model: Megatron's layer ranges for (pipeline rank, virtual stage).
  const int stage = state_->coordinates().pp;
  // Token slices flow through the stages one by one (TeraPipe) when there is a pipeline; on one stage the
  // chunk runs a micro-batch's slices one after another in a single forward (model/token_slices.h).
  const bool slices_in_schedule = !args_.token_slices.empty() && args_.pipeline_model_parallel_size > 1;
  schedule_ = {static_cast<int>(args_.pipeline_model_parallel_size), static_cast<int>(args_.num_micro_batches),
               static_cast<int>(args_.virtual_pipeline_size),
               slices_in_schedule ? static_cast<int>(args_.token_slices.size()) : 1};
  pipeline::validate_schedule(schedule_);
  // Ouroboros on P ranks: the driver builds this rank's modules (K = P + 1 of them, not P stages);
  // params_ and chunks_ stay empty.
  const bool ouroboros_ring = args_.pipeline_schedule == "ouroboros" && schedule_.stages > 1;
  if (!ouroboros_ring) pipeline::validate_layer_split(args_.layer_split, schedule_);
  // The model, its parameters (initialised on the host, moved once) and the optimizer's moments on the
  // device: what is made from here to the rounded weights names no device. Released before the
  // checkpoint loads, which reads into host tensors of its own.
  if (args_.layer_split.uneven()) {  // said once: the flags' split
    std::string counts;
    for (int s = 0; s < schedule_.stages; ++s)
      counts += str_cat(s ? " " : "", pipeline::stage_layer_count(args_.layer_split, schedule_.stages, s));
    say(str_cat(" > layers per pipeline stage: ", counts, " (uneven: --decoder-first/last-pipeline-num-layers)"));
  }
  std::optional<DefaultDeviceScope> on_device;
  on_device.emplace(args_.device);
  for (int k = 0; k < (ouroboros_ring ? 0 : schedule_.chunks); ++k) {
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
  if (cp_.size() > 1)
    say(str_cat(" > context parallelism: each sequence of ", args_.model.seq_length, " tokens in ", 2 * cp_.size(),
                " chunks of ", parallel::context_parallel_chunk_length(args_.model.seq_length, cp_.size()),
                ", rank i of the ", cp_.size(), " holding chunks i and ", 2 * cp_.size() - 1,
                " - i; ring attention (p2p)"));
  params_.allocate(args_.seed);
  if (schedule_.stages > 1 && !ouroboros_ring) {
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
                                                  args_.use_distributed_optimizer);
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
  if (args_.pipeline_schedule == "ouroboros") {
    // Data parallelism: each replica runs the ring on its micro-batches (next_micro_batch deals them);
    // the driver adds the replicas' gradients in replica order before each update.
    const OuroborosOptions o{static_cast<int>(args_.ouroboros_modules), args_.ouroboros_warmup_iters, args_.adam,
                             args_.seed, ouroboros_ring ? &state_->pipeline_group() : nullptr, &tp_,
                             &state_->data_group(), static_cast<int>(args_.ouroboros_emulated_replicas)};
    ouroboros_ = std::make_unique<OuroborosDriver>(args_.model, o);
    say(str_cat(" > Ouroboros (", ouroboros_ring ? str_cat(schedule_.stages, " pipeline ranks, rank 0 holding modules 0 and ",
                                                        o.modules - 1) : std::string("one pipeline rank"),
                tp_.size() > 1 ? str_cat(", tensor parallel over ", tp_.size()) : std::string(),
                args_.data_parallel_size() > 1 ? str_cat(", ", args_.data_parallel_size(), " data-parallel replicas")
                                               : std::string(), "): ",
                o.modules, " modules of ", args_.model.num_layers / o.modules,
                " layers, module k's gradient K-1-k iterations late after ", o.warmup_iters,
                " synchronous iterations; the tied embedding from both ends (docs/ouroboros.md)"));
    if (ouroboros_ring) {  // params_ is empty there: what the modules hold
      int64_t held = 0;
      for (int k = 0; k < ouroboros_->modules(); ++k)
        if (ouroboros_->holds(k)) held += ouroboros_->parameters(k).numel();
      say(str_cat(" > number of parameters in the Ouroboros modules of (tensor, pipeline) rank (", tp_.rank(), ", ",
                  stage, "): ", held));
    }
  }
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
    memory_.rounded_weights = static_cast<double>(params_.gemm_weight_bytes());
    memory_.weight_and_optimizer += memory_.rounded_weights;
  }
  say(memory_report(args_, memory_));
  say(str_cat(" > optimizer state bytes on rank 0: ", optimizer_->state_bytes(),
              args_.use_distributed_optimizer ? str_cat(" (distributed over ", args_.data_parallel_size(),
                                                        " data-parallel ranks)") : std::string()));
  if (args_.loss_scaler) loss_scaler_.emplace(*args_.loss_scaler);
  if (args_.bf16 || args_.fp16) say(mixed_precision_summary(args_));

  if (!args_.load.empty() && ckpt::latest_checkpointed_iteration(args_.load) >= 0) {
    // An Ouroboros checkpoint holds the delayed rule's state beside (on P ranks: instead of) the
    // parameters, which the other schedule cannot continue, and the reverse: refused by name.
    const nlohmann::json saved_args = ckpt::latest_checkpoint_args(args_.load);
    const std::string saved_schedule = saved_args.value("pipeline_schedule", std::string("1f1b"));
    TESSERA_CHECK(saved_schedule == args_.pipeline_schedule, "--load ", args_.load, ": the checkpoint was saved with "
                  "--pipeline-schedule ", saved_schedule, ", this run has --pipeline-schedule ", args_.pipeline_schedule,
                  saved_schedule == "ouroboros" || args_.pipeline_schedule == "ouroboros"
                      ? " (an Ouroboros run resumes only from its own state: weight versions and delayed gradients)"
                      : "");
    if (ouroboros_) check_ouroboros_layout(saved_args, args_);
    bool load_optim = !args_.no_load_optim && !args_.finetune;
    Timer load_timer;
    // Loading assembles the moments in AdamW's full layout (whatever layout saved them): the distributed
    // optimizer takes its shard of them.
    std::unique_ptr<optim::AdamWOptimizer> full;
    optim::AdamWOptimizer* moments = dynamic_cast<optim::AdamWOptimizer*>(optimizer_.get());
    if (distributed_optimizer_ && load_optim) moments = (full = std::make_unique<optim::AdamWOptimizer>(params_, args_.adam)).get();
    if (args_.finetune)  // what finalize_resume let through: the weights fit, the model differs
      if (const auto differences = resumed_model_differences(args_); !differences.empty())
        say(str_cat(" > --finetune: this model differs from the checkpoint's in ", describe(differences)));
    ckpt::TrainingState state = ckpt::load_checkpoint(args_.load, params_, load_optim ? moments : nullptr);
    if (!ouroboros_ring) check_every_tensor_loaded();
    if (full) distributed_optimizer_->load_full_state(*full);
    if (!args_.finetune) {
      if (loss_scaler_ && state.loss_scaler.is_object()) loss_scaler_->load_state(state.loss_scaler);
      iteration_ = state.iteration;
      consumed_samples_ = state.consumed_train_samples;
      skipped_iterations_ = state.skipped_iterations;
      skipped_samples_ = state.skipped_train_samples >= 0 ? state.skipped_train_samples
                                                          : state.skipped_iterations * args_.global_batch_size;
      if (!args_.no_load_rng) args_.seed = state.seed;
    }
    if (ouroboros_) {  // the delayed rule's state, the pending mini-batches' forwards run again
      const int64_t gbs = args_.global_batch_size;
      ouroboros_->load_checkpoint_file(ckpt::open_extra_file(args_.load, ouroboros_file_name()), [&](int64_t s) {
        std::vector<model::MicroBatch> batches;
        for (int64_t m = 0; m < args_.num_micro_batches; ++m)
          batches.push_back(micro_batch(*train_data_, consumed_samples_ - (iteration_ - s) * gbs, m));
        return batches;
      }, args_.seed);
      TESSERA_CHECK(ouroboros_->iteration() == iteration_, "--load ", args_.load, ": the Ouroboros state is at iteration ",
                    ouroboros_->iteration(), ", the checkpoint at ", iteration_);
      if (schedule_.stages == 1) ouroboros_->copy_weights_to(params_);
    }
    say(str_cat(" loaded checkpoint from ", args_.load, " at iteration ", state.iteration,
                args_.finetune ? " (finetune: starting at iteration 0)" : "", " (",
                static_cast<int>(load_timer.seconds() * 1000), " ms)"));
  } else if (!args_.load.empty()) {
    TESSERA_CHECK(!args_.exit_on_missing_checkpoint, "--load=", args_.load, ": no checkpoint there (no ",
                  "latest_checkpointed_iteration.txt), and --exit-on-missing-checkpoint is set");
    say(str_cat(" WARNING: no checkpoint in ", args_.load, "; training from random initialisation"));
  }
  build_teacher();
}

void Trainer::check_every_tensor_loaded() {
  // Every rank marks the checkpoint's tensors its parameters took; one that no rank took (saved by a
  // model with other flags, under --finetune) would otherwise be dropped without a word.
  const std::vector<std::string> names = ckpt::latest_model_tensor_names(args_.load);
  std::set<std::string> mine;
  for (const model::Parameter& p : params_.params()) mine.insert(p.spec.name);
  Tensor taken = Tensor::zeros({static_cast<int64_t>(names.size())}, DType::F32, Device::cpu());
  for (size_t i = 0; i < names.size(); ++i)
    if (mine.count(names[i])) taken.host_f32()[i] = 1;
  world_->all_reduce(taken, comm::ReduceOp::Max);
  std::string left;
  for (size_t i = 0; i < names.size(); ++i)
    if (taken.host_f32()[i] == 0) left += (left.empty() ? "" : ", ") + names[i];
  TESSERA_CHECK(left.empty(), "--load=", args_.load, ": the checkpoint has tensor(s) this model has no parameter for: ",
                left, " (saved by a model with other flags)");
}

void Trainer::build_teacher() {
  if (!distilling(args_, iteration_)) {
    if (args_.kd) say(str_cat(" > knowledge distillation ended at iteration ", args_.kd_stop_iteration,
                              " (--kd-stop-iteration): the teacher is not loaded"));
    return;
  }
  const model::ModelConfig& t = args_.teacher_model;
  std::string experts;
  if (t.moe.enabled()) {
    experts = ", experts per layer";
    for (int64_t e : t.moe.layer_experts) experts += str_cat(" ", e);
  }
  say(str_cat(" > knowledge distillation: loss alpha * CE + beta * tau^2 * KL(teacher || student) with alpha ",
              args_.kd_alpha_ce, ", beta ", args_.kd_beta_ce, ", tau ", args_.kd_temp,
              args_.kd_stop_iteration > 0 ? str_cat(", until iteration ", args_.kd_stop_iteration) : std::string(),
              "; teacher from ", args_.load_teacher, ": ", t.num_layers, " layers, hidden size ", t.hidden_size,
              experts, ", ", t.parameter_count(), " parameters",
              schedule_.stages > 1 ? ", whole on each rank of the last pipeline stage" : ""));
  if (state_->coordinates().pp != schedule_.stages - 1) return;
  teacher_ = std::make_unique<Teacher>(args_, tp_, params_.rounded_value_type());
  say(str_cat(" > loaded the teacher from ", args_.load_teacher, " at iteration ", teacher_->iteration()));
}

void Trainer::build_datasets() {
  std::array<std::shared_ptr<const BatchSource>, 3> sets;
  if (args_.mock_data) {
    sets = build_batch_sources(args_);
    train_data_ = sets[0];
    valid_data_ = sets[1];
    test_data_ = sets[2];
    return;
  }
  for (int turn = 0; turn < 2; ++turn) {  // rank 0 builds and caches; then the others load the cache
    if ((state_->world_rank() == 0) == (turn == 0)) sets = build_batch_sources(args_);
    world_->barrier();
  }
  train_data_ = sets[0];
  valid_data_ = sets[1];
  test_data_ = sets[2];
  const bool per_split = args_.data_path.empty();  // --train-data-path and the like (not --mock-data here)
  // Without --train-data-path only --skip-train gets here (finalize_data).
  TESSERA_CHECK(train_data_ != nullptr || (per_split && args_.skip_train), "--split=", args_.split,
                ": gives the training split no documents");
  // ids without text have no bytes to count
  const BatchSource* any = train_data_ ? train_data_.get() : valid_data_ ? valid_data_.get() : test_data_.get();
  if (args_.tokenizer_type != "NullTokenizer" && any && any->labels_are_text())
    text_tokenizer_ = data::build_tokenizer(tokenizer_options(args_));
  if (!valid_data_ && args_.eval_iters > 0) {
    say(per_split ? std::string(" WARNING: no --valid-data-path; evaluation is off")
                  : str_cat(" WARNING: --split=", args_.split, " leaves no validation documents; evaluation is off"));
  }
  say(str_cat(" > datasets: ", train_data_ ? train_data_->size() : 0, " training samples",
              valid_data_ ? str_cat(", ", valid_data_->size(), " validation samples") : "",
              test_data_ ? str_cat(", ", test_data_->size(), " test samples") : "",
              per_split ? " (--train-data-path, --valid-data-path, --test-data-path)" : ""));
}

int64_t Trainer::current_global_batch() {
  const int64_t size = args_.batch_schedule.at(consumed_samples_);
  if (announced_global_batch_ != 0 && size != announced_global_batch_)
    say(str_cat("ramping up batch size from ", announced_global_batch_, " to ", size));
  announced_global_batch_ = size;
  return size;
}

void Trainer::say(const std::string& line) {
  if (log_) log_->print(line);
}

model::MicroBatch Trainer::next_micro_batch(int64_t m) const { return micro_batch(*train_data_, consumed_samples_, m); }

model::MicroBatch Trainer::micro_batch(const BatchSource& data, int64_t first, int64_t m) const {
  const int64_t mbs = args_.micro_batch_size;
  return data.micro_batch(first + (m * args_.data_parallel_size() + state_->coordinates().dp) * mbs, mbs);
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

model::LossSums Trainer::run_micro_batches(const std::vector<model::MicroBatch>& batches, bool training, float grad_scale,
                                           double per_sample_loss_weight) {
  // The forwards and backwards make their activations on the device. The host batches stay for the
  // host's reads (the loss tokens); each micro-batch is on the device from its first forward to its last
  // use on this rank (micro_batch_on: the same tensors on the CPU).
  DefaultDeviceScope on_device(args_.device);
  std::vector<std::optional<model::MicroBatch>> device_batches(batches.size());
  auto device_batch = [&](int m) -> const model::MicroBatch& {
    if (!device_batches[m]) device_batches[m] = micro_batch_on(batches[m], args_.device);
    return *device_batches[m];
  };
  const int stage = state_->coordinates().pp;
  pipeline::ScheduleShape shape = schedule_;
  shape.micro_batches = static_cast<int>(batches.size());
  params_.weights_changed();  // an optimizer step or a load may have changed them since the last schedule
  std::vector<pipeline::Op> ops = pipeline::build_schedule(shape, stage, /*forward_only=*/!training);
  // The activation records of the (micro-batch, chunk) pairs between their forward and backward.
  std::map<std::pair<int, int>, std::unique_ptr<model::ChunkRecord>> records;
  model::LossSums losses;
  auto context = [&](int m) {
    model::ForwardContext ctx{args_.seed, training ? iteration_ + 1 : iteration_, batches[m].sample_offset,
                              training, args_.model.seq_length, args_.micro_batch_size};
    ctx.per_sample_loss_weight = per_sample_loss_weight;
    return ctx;
  };
  // Under --overlap-param-gather the forward waits for each bucket of parameters just before its first
  // use, as Megatron's forward pre-hooks do.
  model::ParamHooks forward_hooks, overlapped_backward_hooks;
  if (distributed_optimizer_ && args_.overlap_param_gather)
    forward_hooks.params_needed_below = [this](int64_t end) { buckets_->wait_param_gather_below(end); };
  overlapped_backward_hooks.grads_final_from = [this](int64_t first) { buckets_->mark_final_from(first); };
  pipeline::StageCallbacks callbacks;
  // With token slices in the schedule a micro-batch's record lives from its slice 0's forward to its
  // slice 0's backward and grows and shrinks slice by slice; the records' bytes are counted as they change.
  const bool sliced = shape.slices > 1;
  const int last_slice = shape.slices - 1;
  int live_slices = 0;
  callbacks.forward = [&](int m, int chunk, int slice, const Tensor& input) {
    if (training && m == 0 && slice == 0) maybe_inject_fault(injected_fault_, state_->world_rank(), iteration_ + 1, false);
    std::unique_ptr<model::ChunkRecord>& rec = records[{m, chunk}];
    if (slice == 0) rec = chunks_[chunk]->make_record();
    const int64_t bytes_before = rec->bytes();
    live_slices += 1;
    peak_live_activations_ =
        std::max(peak_live_activations_, sliced ? live_slices : static_cast<int>(records.size()));
    model::ForwardContext ctx = context(m);
    // The teacher's forward on the same micro-batch, just before the student's chunk with the head
    // uses its logits (and holds them until its backward). (--kd is refused with token slices.)
    model::Distillation kd;
    if (teacher_ && chunks_[chunk]->chunk().post_process) {
      kd = teacher_->target(device_batch(m), ctx);
      ctx.distillation = &kd;
      ++teacher_forwards_;
    }
    const model::MicroBatch& batch = device_batch(m);
    Tensor out = sliced ? sliced_chunks_[chunk]->forward_slice(slice, batch, input, ctx, *rec, losses, forward_hooks)
                        : chunks_[chunk]->forward(batch, input, ctx, *rec, losses, forward_hooks);
    if (!training) {
      if (slice == last_slice) records.erase({m, chunk}), live_slices -= shape.slices;
      if (slice == last_slice && chunk + 1 == static_cast<int>(chunks_.size())) device_batches[m].reset();
      return out;
    }
    live_activation_bytes_ += rec->bytes() - bytes_before;
    peak_activation_bytes_ = std::max(peak_activation_bytes_, live_activation_bytes_);
    return out;
  };
  callbacks.backward = [&](int m, int chunk, int slice, const Tensor& grad_output) {
    if (m == 0 && slice == last_slice) maybe_inject_fault(injected_fault_, state_->world_rank(), iteration_ + 1, true);
    // During each chunk's last backward, gradient buckets start their data-parallel all-reduce as soon
    // as they are final (with token slices, in the backward of the last micro-batch's slice 0).
    bool overlap = args_.overlap_grad_reduce && m + 1 == shape.micro_batches;
    auto it = records.find({m, chunk});
    const int64_t bytes_before = it->second->bytes();
    const model::ParamHooks& hooks = overlap ? overlapped_backward_hooks : model::ParamHooks();
    Tensor grad_input = sliced ? sliced_chunks_[chunk]->backward_slice(slice, *it->second, grad_output, context(m),
                                                                       grad_scale, hooks)
                               : chunks_[chunk]->backward(*it->second, grad_output, context(m), grad_scale, hooks);
    live_slices -= 1;
    if (slice == 0) {  // the record goes (backward may have widened what it held: count what it had)
      live_activation_bytes_ -= bytes_before;
      records.erase(it);
      if (chunk == 0) device_batches[m].reset();  // the micro-batch's last use on this rank
    } else {  // the slice's own record went; the caches' gradients came
      live_activation_bytes_ -= bytes_before - it->second->bytes();
    }
    return grad_input;
  };
  pipeline::run_schedule(ops, p2p_.get(), callbacks, times_);
  TESSERA_CHECK(records.empty(), "pipeline schedule left ", records.size(), " activation records behind");
  return losses;
}

double Trainer::train_step(float lr, int64_t global_batch, optim::StepResult& step) {
  TESSERA_PROFILE_SCOPE("train_step");
  const int64_t micro_batches = global_batch / (args_.micro_batch_size * args_.data_parallel_size());
  if (ouroboros_) {  // the delayed-gradient rule: every module here, or this rank's (train/ouroboros_driver.h)
    std::vector<model::MicroBatch> batches;
    for (int64_t m = 0; m < micro_batches; ++m) batches.push_back(next_micro_batch(m));
    ouroboros_->step(batches, lr);
    if (schedule_.stages == 1) ouroboros_->copy_weights_to(params_);
    step.grad_norm = ouroboros_->last_grad_norm();
    // As the pipelined path reports it: the loss sum as an fp32 value over the loss tokens.
    const double tokens = ouroboros_->last_loss_tokens();
    return tokens > 0 ? static_cast<float>(ouroboros_->last_loss_sum()) / tokens : 0.0;
  }
  // The previous step's parameter all-gather: with --overlap-param-gather the forward waits for it bucket
  // by bucket (run_micro_batches), otherwise it is already complete.
  std::vector<model::MicroBatch> batches;
  std::vector<float> global_tokens(1, 0.0f);  // loss-counted tokens of the whole global batch
  for (int64_t m = 0; m < micro_batches; ++m) {
    batches.push_back(next_micro_batch(m));
    const Tensor& mask = batches.back().loss_mask;
    for (int64_t i = 0; i < mask.numel(); ++i) global_tokens[0] += mask.host_f32()[i];
  }
  data_parallel_sum(global_tokens);
  const double tokens = global_tokens[0];
  // The objective is the mean loss over the global batch's tokens, so every micro-batch's gradient is
  // scaled by 1 / (tokens in the global batch): the sum over micro-batches (and, later, data-parallel
  // ranks) is then the gradient of the mean whatever the split.
  const float grad_scale = tokens > 0 ? static_cast<float>(1.0 / tokens) : 0.0f;
  // Loss scaling multiplies the backward seed; the optimizer divides the gradients by it again.
  const float loss_scale = loss_scaler_ ? loss_scaler_->scale() : 1.0f;
  params_.zero_grad();
  const model::LossSums sums =
      run_micro_batches(batches, true, grad_scale * loss_scale, tokens / static_cast<double>(global_batch));
  // The LM loss, then the model's auxiliary losses in the order of its names.
  const std::vector<std::string> names = auxiliary_loss_names();
  std::vector<float> loss{static_cast<float>(sums.lm)};
  for (float v : auxiliary_values(sums)) loss.push_back(v);
  interval_routing_.add(sums.routing);
  optimizer_->wait_for_params();  // any bucket no forward used
  for (int64_t at : args_.inject_nan_at_iterations)
    if (at == iteration_ + 1)  // through a transfer: the gradients may be on a GPU
      kernels::transfer(params_.grads().flat_range(0, 1), kernels::scalar_tensor(std::nan(""), Device::cpu()));
  Timer reduce;
  finalize_gradients();
  reduce_seconds_ += reduce.seconds();
  Timer optimizer;
  {
    DefaultDeviceScope on_device(args_.device);  // what the step makes (it reads back only the norm)
    step = optimizer_->step(lr, loss_scale);
  }
  optimizer_seconds_ += optimizer.seconds();
  pipeline_sum(loss);
  context_parallel_sum(loss);
  data_parallel_sum(loss);
  for (size_t i = 0; i < names.size(); ++i) auxiliary_loss_history_[names[i]].push_back(tokens > 0 ? loss[1 + i] / tokens : 0.0);
  return tokens > 0 ? loss[0] / tokens : 0.0;
}

void Trainer::finalize_gradients() {
  buckets_->finish();
  // Norm weights (and other replicated parameters) computed on sequence shards hold partial gradients.
  if (tp_.sequence_parallel && tp_.size() > 1)
    for (const model::Parameter& p : params_.params())
      if (p.spec.sequence_parallel_grad) tp_.group->all_reduce(p.grad);
  // The first and last pipeline stages each hold the tied word embedding: sum their gradients.
  if (comm::ProcessGroup* embedding = state_->embedding_group())
    for (const model::Parameter& p : params_.params())
      if (p.spec.shared_with_last_stage) embedding->all_reduce(p.grad);
}

Evaluation Trainer::evaluate() {
  TESSERA_CHECK(valid_data_ != nullptr,
                args_.data_path.empty() ? std::string("no --valid-data-path")
                                        : str_cat("--split=", args_.split, ": no validation documents"),
                " to evaluate");
  return evaluate_on(*valid_data_);
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

std::vector<std::string> Trainer::auxiliary_loss_names() const {
  // (No chunks here under Ouroboros on P ranks: it trains GPT, which declares none.)
  std::vector<std::string> names = chunks_.empty() ? std::vector<std::string>() : chunks_.front()->auxiliary_loss_names();
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
    const std::span<const float> mask(b.loss_mask.host_f32(), static_cast<size_t>(b.loss_mask.numel()));
    for (float w : mask) counts[kTokens] += w;
    if (text_tokenizer_ && data.labels_are_text())
      counts[kBytes] += static_cast<float>(data::text_bytes(
          *text_tokenizer_, std::span<const int32_t>(b.labels.host_i32(), mask.size()), mask));
  }
  data_parallel_sum(counts);
  const double samples = static_cast<double>(args_.eval_iters * args_.global_batch_size);
  pipeline::PipelineTimes saved = times_;  // evaluation is not part of the training timers
  model::LossSums sums;
  if (ouroboros_ && schedule_.stages > 1) {
    // Ouroboros on P ranks: forward through the driver's modules, a global batch's micro-batches at a
    // time (what training holds at once), keyed as run_micro_batches keys an evaluation.
    const int64_t step = args_.num_micro_batches;
    for (size_t first = 0; first < batches.size(); first += static_cast<size_t>(step)) {
      const std::vector<model::MicroBatch> part(batches.begin() + static_cast<std::ptrdiff_t>(first),
                                                batches.begin() + static_cast<std::ptrdiff_t>(
                                                                      std::min(batches.size(), first + step)));
      ouroboros_->forward_only(part, [&](int m) {
        model::ForwardContext ctx{args_.seed, iteration_, part[m].sample_offset, false, args_.model.seq_length,
                                  args_.micro_batch_size};
        ctx.per_sample_loss_weight = counts[kTokens] / samples;
        return ctx;
      }, sums);
    }
  } else {
    sums = run_micro_batches(batches, false, 0.0f, counts[kTokens] / samples);
  }
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

std::string Trainer::ouroboros_file_name() const {
  const comm::RankCoordinates rc = state_->coordinates();
  char buf[64];
  std::snprintf(buf, sizeof buf, "ouroboros.tp%02d.pp%02d.dp%03d.safetensors", rc.tp, rc.pp, rc.dp);
  return buf;
}

void Trainer::save() {
  ckpt::TrainingState state{iteration_,          consumed_samples_,
                            skipped_iterations_, args_.seed,
                            arguments_json(args_), loss_scaler_ ? loss_scaler_->state() : nlohmann::json(),
                            skipped_samples_,
                            {{"vocab_file", args_.vocab_file},
                             {"merge_file", args_.merge_file},
                             {"tokenizer_model", args_.tokenizer_model}}};
  Timer t;
  comm::RankCoordinates rc = state_->coordinates();
  optimizer_->wait_for_params();
  // With the distributed optimizer every data-parallel rank writes the moments it owns. The ranks of a
  // context-parallel group hold replicas of the dense weights (as data-parallel ones do), so the writer
  // of a dense shard is rank 0 of the data x context group: one rank per (tensor, pipeline) shard.
  const int dense_data_rank = state_->data_context_group().rank();
  // Ouroboros: every rank writes its modules' delayed state (replicas differ in their waiting gradients).
  std::vector<ckpt::ExtraFile> extra;
  if (ouroboros_) extra.push_back(ouroboros_->checkpoint_file(ouroboros_file_name()));
  ckpt::save_checkpoint(args_.save, state, params_, args_.no_save_optim ? nullptr : optimizer_.get(),
                        {rc.tp, dense_data_rank, world_, rc.pp, rc.etp, rc.ep, rc.edp}, args_.ckpt_keep_last, extra);
  say(str_cat(" saved checkpoint at iteration ", iteration_, " to ", args_.save, " (",
                     static_cast<int>(t.seconds() * 1000), " ms)"));
}

void Trainer::log_timers(int64_t iterations) {
  const double per_iteration_ms = 1000.0 / static_cast<double>(std::max<int64_t>(iterations, 1));
  const pipeline::PipelineTimes& t = times_;
  const int stage = state_->coordinates().pp;
  enum { kForward, kBackward, kP2p, kReduce, kOptimizer, kBubble, kPeak, kStage, kActivations, kActivationsTheory,
         kAllTensors, kPeakRss, kRingWait, kFields };
  Tensor mine = Tensor::empty({kFields}, DType::F32, Device::cpu());  // the log's numbers, on the host
  float* v = mine.host_f32();
  v[kForward] = static_cast<float>(t.forward * per_iteration_ms);
  v[kBackward] = static_cast<float>(t.backward * per_iteration_ms);
  v[kP2p] = static_cast<float>(t.p2p_wait * per_iteration_ms);
  v[kReduce] = static_cast<float>(reduce_seconds_ * per_iteration_ms);
  v[kOptimizer] = static_cast<float>(optimizer_seconds_ * per_iteration_ms);
  v[kBubble] = static_cast<float>(t.bubble_fraction());
  v[kPeak] = static_cast<float>(peak_live_activations_);
  v[kStage] = static_cast<float>(stage);
  v[kActivations] = static_cast<float>(peak_activation_bytes_);
  v[kActivationsTheory] = static_cast<float>(memory_.activations);
  v[kAllTensors] = static_cast<float>(TensorMemory::peak_bytes());
  v[kPeakRss] = static_cast<float>(peak_resident_bytes());  // the kernel's count, to check the one above
  v[kRingWait] = static_cast<float>(ring_wait_seconds_ * per_iteration_ms);
  times_ = {};
  peak_activation_bytes_ = live_activation_bytes_;
  TensorMemory::reset_peak();
  reduce_seconds_ = optimizer_seconds_ = ring_wait_seconds_ = 0;
  peak_live_activations_ = 0;
  Tensor all = Tensor::empty({world_->size() * kFields}, DType::F32, Device::cpu());
  world_->all_gather(mine, all);
  if (!log_) return;

  // Megatron's timers: each as (min, max) over ranks, in ms per iteration.
  auto min_max = [&](int field) {
    float lo = all.host_f32()[field], hi = lo;
    for (int r = 1; r < world_->size(); ++r) {
      lo = std::min(lo, all.host_f32()[r * kFields + field]);
      hi = std::max(hi, all.host_f32()[r * kFields + field]);
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, "(%.1f, %.1f)", lo, hi);
    return std::string(buf);
  };
  say(str_cat("    timers (ms per iteration, min and max over ranks): forward-compute ", min_max(kForward),
              " | backward-compute ", min_max(kBackward), " | pipeline-p2p-wait ", min_max(kP2p),
              " | grads-reduce ", min_max(kReduce), " | optimizer ", min_max(kOptimizer),
              // The ring's exchange that its blocks did not hide (inside the compute timers above).
              args_.context_parallel_size > 1 ? str_cat(" | cp-ring-wait (in compute) ", min_max(kRingWait)) : ""));
  // Memory of world rank 0, and the largest over ranks of what differs between them.
  auto max_over_ranks = [&](int field) {
    float hi = 0;
    for (int r = 0; r < world_->size(); ++r) hi = std::max(hi, all.host_f32()[r * kFields + field]);
    return static_cast<double>(hi);
  };
  say(str_cat("    memory (MB): parameters ", megabytes(static_cast<double>(params_.values().nbytes())),
              " | gradients ", megabytes(static_cast<double>(params_.grads().nbytes())), " | optimizer state ",
              megabytes(static_cast<double>(optimizer_->state_bytes())),
              " | activations peak (max over ranks) ", megabytes(max_over_ranks(kActivations)), " (theory ",
              megabytes(max_over_ranks(kActivationsTheory)), ") | all tensors peak (max over ranks) ",
              megabytes(max_over_ranks(kAllTensors)), " | peak RSS (max over ranks) ",
              megabytes(max_over_ranks(kPeakRss)), device_memory_summary(args_.device)));
  if (ouroboros_) {  // what the delays keep on this rank (docs/ouroboros.md, "What each module keeps")
    std::string kept;
    for (int k = 0; k < ouroboros_->modules(); ++k)
      if (ouroboros_->holds(k))
        kept += str_cat(kept.empty() ? "" : " | ", "module ", k, ": ", ouroboros_->held_weight_versions(k),
                        " earlier weight versions (",
                        megabytes(static_cast<double>(ouroboros_->held_weight_versions(k)) *
                                  static_cast<double>(ouroboros_->parameters(k).values().nbytes())),
                        " MB), ", ouroboros_->held_records(k), " activation records");
    say(str_cat("    ouroboros delays keep (rank 0): ", kept));
    return;
  }
  if (schedule_.stages == 1) return;
  // The bubble as (schedule time - compute) / compute, averaged over ranks, beside (p - 1) / (v m); and
  // each stage's most activation records held at once beside the schedule's maximum.
  double bubble = 0;
  std::vector<int> peak(schedule_.stages, 0);
  for (int r = 0; r < world_->size(); ++r) {
    bubble += all.host_f32()[r * kFields + kBubble] / world_->size();
    int s = static_cast<int>(all.host_f32()[r * kFields + kStage]);
    peak[s] = std::max(peak[s], static_cast<int>(all.host_f32()[r * kFields + kPeak]));
  }
  std::string held;
  for (int s = 0; s < schedule_.stages; ++s)
    held += str_cat(s ? " " : "", peak[s], "/", pipeline::theoretical_peak_in_flight(schedule_, s));
  char buf[160];
  std::snprintf(buf, sizeof buf, "    pipeline bubble: measured %.3f, theory %s = %.3f | ", bubble,
                schedule_.slices > 1 ? "(p-1)/(m*n) with n token slices" : "(p-1)/(v*m)",
                pipeline::theoretical_bubble_fraction(schedule_));
  say(str_cat(buf, schedule_.slices > 1 ? "token-slice activations" : "activations",
              " held per stage (measured/schedule max): ", held));
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
    const bool save_now = !args_.save.empty() && ((args_.save_interval > 0 && iteration_ % args_.save_interval == 0) ||
                                                  iteration_ == args_.train_iters);
    if (save_now) save();
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
