// Tessera's side of a checkpoint: what the run records, resuming from --load (the model and tokenizer
// were checked against the checkpoint with the other flags, finalize_resume) and saving.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <thread>

#include "ckpt/checkpoint.h"
#include "train/args/model_flags.h"
#include "train/fault_injection.h"
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
          // A rank-local (non-persistent) checkpoint resumes only at the layout that saved it.
          {"world_size", a.world_size},
          {"expert_model_parallel_size", a.expert_model_parallel_size},
          {"expert_tensor_parallel_size", a.expert_tensor_parallel_size},
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

}  // namespace

int64_t Trainer::agreed_local_iteration() {
  const std::string dir = non_persistent_local_dir(args_, state_->world_rank());
  // This rank's newest local checkpoint, if it was saved at this layout (its files are this rank's shards).
  int64_t mine = -1;
  std::error_code ec;
  if (std::filesystem::is_directory(dir, ec)) mine = ckpt::latest_checkpointed_iteration(dir);
  if (mine >= 0) {
    const nlohmann::json saved = ckpt::latest_checkpoint_args(dir), here = arguments_json(args_);
    for (const char* key : {"world_size", "tensor_model_parallel_size", "pipeline_model_parallel_size",
                            "virtual_pipeline_model_parallel_size", "context_parallel_size",
                            "expert_model_parallel_size", "expert_tensor_parallel_size"})
      if (saved.value(key, nlohmann::json()) != here.at(key)) {
        if (state_->world_rank() == 0)
          say(str_cat(" WARNING: the local non-persistent checkpoints in ", args_.non_persistent_local_ckpt_dir,
                      " were saved at another layout (", key, "); not used"));
        mine = -1;
        break;
      }
  }
  // The newest iteration every rank has: the oldest of the ranks' newest. A save is completed rank by rank
  // only after every rank's files are written, and the older one is removed only after every rank
  // completed the newer, so each rank still has it unless its disk was lost (then none is used).
  Tensor t = Tensor::zeros({2}, DType::I64, Device::cpu());
  t.host_i64()[0] = -mine;  // the largest negation: the smallest iteration
  world_->all_reduce(t, comm::ReduceOp::Max);
  const int64_t agreed = -t.host_i64()[0];
  if (agreed < 0) {
    if (mine >= 0)  // said by rank 0 when it has one
      say(str_cat(" WARNING: not every rank has a local non-persistent checkpoint in ", args_.non_persistent_local_ckpt_dir,
                  " (a node's disk lost or replaced?); they are not used"));
    return -1;
  }
  t.host_i64()[0] = ckpt::checkpoint_complete(dir, agreed) ? 0 : 1;
  t.host_i64()[1] = 0;
  world_->all_reduce(t, comm::ReduceOp::Max);
  if (t.host_i64()[0] != 0) {
    say(str_cat(" WARNING: not every rank has the local non-persistent checkpoint of iteration ", agreed, " in ",
                args_.non_persistent_local_ckpt_dir, "; not used"));
    return -1;
  }
  if (mine > agreed) ckpt::roll_back_checkpoints(dir, agreed);  // a newer save not every rank completed
  return agreed;
}

std::pair<std::string, bool> Trainer::resume_directory() {
  if (args_.load.empty()) return {"", false};
  // --load's and the global non-persistent checkpoints, the newest of them (a non-persistent one wins a tie).
  std::string shared = newest_shared_checkpoint_dir(args_);
  if (args_.non_persistent_ckpt_type != "local") return {shared, false};
  const int64_t local = agreed_local_iteration();
  const int64_t other = shared.empty() ? -1 : ckpt::latest_checkpointed_iteration(shared);
  if (local >= 0 && local >= other) return {non_persistent_local_dir(args_, state_->world_rank()), true};
  return {shared, false};
}

void Trainer::resume() {
  const auto [dir, rank_local] = resume_directory();
  if (!dir.empty()) {
    // A rank's local checkpoint was not seen by the flags' check (finalize_resume): it is checked here.
    if (rank_local) check_resumed_model(args_, dir);
    // A checkpoint this run's step engine cannot continue is refused by name (train/step_engine.h).
    check_resumable(ckpt::latest_checkpoint_args(dir), args_);
    bool load_optim = !args_.no_load_optim && !args_.finetune;
    Timer load_timer;
    // Loading assembles the moments in AdamW's full layout (whatever layout saved them): the distributed
    // optimizer takes its shard of them.
    std::unique_ptr<optim::AdamWOptimizer> full;
    optim::AdamWOptimizer* moments = dynamic_cast<optim::AdamWOptimizer*>(optimizer_.get());
    if (distributed_optimizer_ && load_optim) moments = (full = std::make_unique<optim::AdamWOptimizer>(params_, args_.adam)).get();
    if (args_.finetune)  // what finalize_resume let through: the weights fit, the model differs
      if (const auto differences = resumed_model_differences(args_, dir); !differences.empty())
        say(str_cat(" > --finetune: this model differs from the checkpoint's in ", describe(differences)));
    ckpt::TrainingState state = ckpt::load_checkpoint(dir, params_, load_optim ? moments : nullptr);
    if (!engine_holds_model(args_)) check_every_tensor_loaded(dir, rank_local);  // else params_ is empty
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
    // The engine's own state (its files beside the parameters), given each earlier iteration's batches.
    engine_->resume(dir, iteration_, args_.seed, [&](int64_t s) {
      std::vector<model::MicroBatch> batches;
      for (int64_t m = 0; m < args_.num_micro_batches; ++m)
        batches.push_back(micro_batch(*train_data_, consumed_samples_ - (iteration_ - s) * args_.global_batch_size, m));
      return batches;
    });
    // Rank 0 names where it loaded from: --load, or a non-persistent checkpoint (local: its own directory).
    const std::string kind = dir == args_.load ? ""
                             : rank_local     ? " (non-persistent, local: each rank its own directory)"
                                              : " (non-persistent, global)";
    say(str_cat(" loaded checkpoint from ", dir, kind, " at iteration ", state.iteration,
                args_.finetune ? " (finetune: starting at iteration 0)" : "", " (",
                static_cast<int>(load_timer.seconds() * 1000), " ms)"));
  } else if (!args_.load.empty()) {
    TESSERA_CHECK(!args_.exit_on_missing_checkpoint, "--load=", args_.load, ": no checkpoint there (no ",
                  "latest_checkpointed_iteration.txt), and --exit-on-missing-checkpoint is set");
    say(str_cat(" WARNING: no checkpoint in ", args_.load, "; training from random initialisation"));
  }
}

void Trainer::check_every_tensor_loaded(const std::string& dir, bool rank_local) {
  // Every rank marks the checkpoint's tensors its parameters took; one that no rank took (saved by a
  // model with other flags, under --finetune) would otherwise be dropped without a word. A rank's own
  // (local) checkpoint is this rank's alone: its parameters must take all of it.
  const std::vector<std::string> names = ckpt::latest_model_tensor_names(dir);
  std::set<std::string> mine;
  for (const model::Parameter& p : params_.params()) mine.insert(p.spec.name);
  Tensor taken = Tensor::zeros({static_cast<int64_t>(names.size())}, DType::F32, Device::cpu());
  for (size_t i = 0; i < names.size(); ++i)
    if (mine.count(names[i])) taken.host_f32()[i] = 1;
  if (!rank_local) world_->all_reduce(taken, comm::ReduceOp::Max);
  std::string left;
  for (size_t i = 0; i < names.size(); ++i)
    if (taken.host_f32()[i] == 0) left += (left.empty() ? "" : ", ") + names[i];
  TESSERA_CHECK(left.empty(), "--load=", args_.load, ": the checkpoint has tensor(s) this model has no parameter for: ",
                left, " (saved by a model with other flags)");
}

void Trainer::prepare_save_directories(int world_rank) {
  if (!args_.save.empty()) ckpt::prepare_save_directory(args_.save);
  if (args_.non_persistent_save_interval <= 0) return;
  if (args_.non_persistent_ckpt_type == "global")
    ckpt::prepare_save_directory(non_persistent_global_save_dir(args_), "--non-persistent-global-ckpt-dir");
  if (args_.non_persistent_ckpt_type == "local")
    ckpt::prepare_save_directory(non_persistent_local_dir(args_, world_rank), "--non-persistent-local-ckpt-dir");
}

void Trainer::save(SaveKind kind) {
  finish_pending_save(/*blocking=*/true);  // one save at a time: the one before is finalised first
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
  // The step engine's own state, if any: every rank writes its files.
  const std::vector<ckpt::ExtraFile> extra = engine_->checkpoint_files();
  ckpt::ShardPlacement placement{rc.tp, dense_data_rank, world_, rc.pp, rc.etp, rc.ep, rc.edp};
  std::string dir = args_.save;
  int64_t keep_last = args_.ckpt_keep_last;
  if (kind == SaveKind::NonPersistentGlobal) {
    dir = non_persistent_global_save_dir(args_);
    keep_last = 1;  // the older ones go once the newer is complete
  } else if (kind == SaveKind::NonPersistentLocal) {
    // Each rank all it holds, alone in its own directory; the older ones are removed once every rank
    // has completed the newer (finish_pending_save).
    dir = non_persistent_local_dir(args_, state_->world_rank());
    keep_last = 0;
    placement.world = nullptr;
    placement.every_tensor = true;
  }
  auto save = std::make_unique<ckpt::CheckpointSave>(dir, state, params_, args_.no_save_optim ? nullptr : optimizer_.get(),
                                                     placement, keep_last, extra, /*own_copies=*/args_.async_save);
  // Test hooks: TESSERA_INJECT_FAULT=RANK:ITERATION:save fails this rank's write after its first file;
  // TESSERA_CKPT_WRITE_DELAY_MS=N pauses N ms after each file (a slow disk: saves that kills can interrupt).
  const char* delay = std::getenv("TESSERA_CKPT_WRITE_DELAY_MS");
  auto after_file = [fault = injected_fault_, rank = state_->world_rank(), iteration = iteration_,
                     delay_ms = delay ? std::atoi(delay) : 0](const std::string& f) {
    maybe_inject_save_fault(fault, rank, iteration, f);
    if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  };
  pending_save_.emplace(
      PendingSave{std::make_unique<CheckpointWriter>(std::move(save), after_file, args_.async_save), kind, 0});
  pending_save_->blocked_seconds = t.seconds();
  if (!args_.async_save) {
    finish_pending_save(/*blocking=*/true);
    return;
  }
  say(str_cat(" started asynchronous save of", kind == SaveKind::Persistent ? "" : " non-persistent", " checkpoint at iteration ",
              iteration_, " to ", kind == SaveKind::NonPersistentLocal ? args_.non_persistent_local_ckpt_dir : dir,
              " (training blocked ", static_cast<int>(pending_save_->blocked_seconds * 1000), " ms copying ",
              pending_save_->writer->save().tensor_bytes() >> 20, " MiB)"));
}

bool Trainer::finish_pending_save(bool blocking) {
  if (!pending_save_) return true;
  Timer t;
  CheckpointWriter& writer = *pending_save_->writer;
  ckpt::CheckpointSave& save = writer.save();
  if (blocking) writer.wait();
  // One all-reduce: whether any rank's write is still running, and the highest rank whose write failed.
  const bool done = writer.done();
  Tensor flags = Tensor::zeros({2}, DType::I64, Device::cpu());
  flags.host_i64()[0] = done ? 0 : 1;
  flags.host_i64()[1] = done && !writer.error().empty() ? state_->world_rank() + 1 : 0;
  world_->all_reduce(flags, comm::ReduceOp::Max);
  if (flags.host_i64()[1] > 0) {
    // Every rank ends with the failed rank's message (its text broadcast), so no rank waits on the others.
    const int failed = static_cast<int>(flags.host_i64()[1] - 1);
    constexpr int64_t kLength = 1024;
    Tensor text = Tensor::zeros({kLength}, DType::I64, Device::cpu());
    if (state_->world_rank() == failed)
      for (size_t i = 0; i < writer.error().size() && i < static_cast<size_t>(kLength); ++i)
        text.host_i64()[i] = static_cast<unsigned char>(writer.error()[i]);
    world_->broadcast(text, failed);
    std::string message;
    for (int64_t i = 0; i < kLength && text.host_i64()[i] != 0; ++i) message += static_cast<char>(text.host_i64()[i]);
    const int64_t iteration = save.iteration();
    throw Error(str_cat("the checkpoint of iteration ", iteration, " could not be saved: rank ", failed,
                        " failed writing its files: ", message, " (the tracker still names the checkpoint before it)"));
  }
  if (flags.host_i64()[0] > 0) {  // not every rank's write has ended: training goes on
    pending_save_->blocked_seconds += t.seconds();
    return false;
  }
  // Every rank's files are complete and synced: the index, the rename and the tracker.
  save.finalize();
  const SaveKind kind = pending_save_->kind;
  std::string where = save.save_dir();
  if (kind == SaveKind::NonPersistentLocal) {
    world_->barrier();  // every rank has renamed its newer checkpoint into place: the older can go
    ckpt::prune_checkpoints(save.save_dir(), 1);
    where = args_.non_persistent_local_ckpt_dir;
  }
  const double blocked = pending_save_->blocked_seconds + t.seconds();
  const std::string what = kind == SaveKind::Persistent          ? "checkpoint"
                           : kind == SaveKind::NonPersistentGlobal ? "non-persistent checkpoint (global)"
                                                                   : "non-persistent checkpoint (local)";
  if (args_.async_save)
    say(str_cat(" saved ", what, " at iteration ", save.iteration(), " to ", where, " (asynchronous: written in ",
                static_cast<int>(writer.write_seconds() * 1000), " ms; training blocked ",
                static_cast<int>(blocked * 1000), " ms)"));
  else
    say(str_cat(" saved ", what, " at iteration ", save.iteration(), " to ", where, " (",
                static_cast<int>(blocked * 1000), " ms)"));
  pending_save_.reset();
  return true;
}

}  // namespace tessera::train
