// Tessera's side of a checkpoint: what the run records, resuming from --load (the model and tokenizer
// were checked against the checkpoint with the other flags, finalize_resume) and saving.
#include <filesystem>
#include <set>

#include "ckpt/checkpoint.h"
#include "train/args/model_flags.h"
#include "train/trainer.h"

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
          {"seed", a.seed},
          // For `tessera convert --saver megatron`: Megatron's vocabulary padding and stored weight type.
          {"make_vocab_size_divisible_by", a.make_vocab_size_divisible_by},
          {"bf16", a.bf16},
          {"fp16", a.fp16}};
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

}  // namespace

void Trainer::resume() {
  // Ouroboros on P ranks: params_ is empty there (the driver holds the modules and their state).
  const bool ouroboros_ring = args_.pipeline_schedule == "ouroboros" && schedule_.stages > 1;
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

}  // namespace tessera::train
