// The training loop of `tessera train`: micro-batches accumulated into a global batch, AdamW with
// clipping and a learning-rate schedule, periodic evaluation, logging and checkpoints.
#pragma once

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/parallel_state.h"
#include "core/timer.h"
#include "model/model_factory.h"
#include "model/token_sliced_chunk.h"
#include "parallel/expert_dispatch.h"
#include "parallel/grad_buckets.h"
#include "pipeline/executor.h"
#include "optim/adamw_optimizer.h"
#include "optim/distributed_optimizer.h"
#include "train/args/arguments.h"
#include "train/async_checkpoint.h"
#include "data/blended_dataset.h"
#include "infer/training_sampler.h"
#include "train/batching.h"
#include "train/distillation.h"
#include "train/fault_injection.h"
#include "train/gradient_groups.h"
#include "train/mock_data.h"
#include "train/rerun_state_machine.h"
#include "train/memory_report.h"
#include "train/step_engine.h"
#include "train/training_log.h"
#include "train/zero_bubble_timing.h"

namespace tessera::train {

class Trainer {
 public:
  // Builds this rank's part of the model (its tensor-parallel shard, its data-parallel share of each
  // batch) and the optimizer, and resumes from --load when it holds a checkpoint. Collective over
  // `world`; a null world is a single process.
  explicit Trainer(TrainArguments args, comm::ProcessGroup* world = nullptr);
  Trainer(const Trainer&) = delete;  // the model keeps references into the trainer
  Trainer& operator=(const Trainer&) = delete;

  // Trains from the current iteration to --train-iters.
  void train();
  // Mean per-token loss over --eval-iters global batches of the validation split, and its bits per byte.
  Evaluation evaluate();
  // Megatron's evaluation after training (pretrain's do_valid/do_test), with --eval-iters batches: the
  // test split when it has documents, and with --skip-train the validation split first; each printed as
  // "validation loss at iteration N on <split> set | ...". As in Megatron, not done after an exit.
  void evaluate_after_training();
  // Whether train() ended on an exit condition (an exit signal, --exit-interval, --exit-duration-in-mins),
  // at the last iteration or before.
  bool exit_condition_met() const { return exit_condition_met_; }

  // Called once on the reporting rank after the first log line, with its measured elapsed ms per
  // iteration; the returned text is printed (tessera train puts the planner's prediction beside it).
  std::function<std::string(double elapsed_ms)> first_interval_note;

  int64_t iteration() const { return iteration_; }
  // This rank's micro-batch m of the next training iteration, as train() feeds it to the model.
  model::MicroBatch next_micro_batch(int64_t m) const;
  // The lm loss of every iteration this Trainer ran, in order.
  const std::vector<double>& losses() const { return losses_; }
  // Zero bubble: the measured pass costs the lists were rebuilt from, once taken.
  std::optional<pipeline::ZeroBubbleCosts> zero_bubble_costs() const {
    return zero_bubble_timing_ ? zero_bubble_timing_->costs() : std::nullopt;
  }
  // The model's auxiliary losses (per loss token) of every iteration this Trainer ran, by name.
  const std::map<std::string, std::vector<double>>& auxiliary_losses() const { return auxiliary_loss_history_; }
  model::ParameterSet& parameters() { return params_; }
  int64_t skipped_iterations() const { return skipped_iterations_; }
  // What turns each global batch into an optimizer step, by --pipeline-schedule (train/step_engine.h).
  StepEngine& engine() { return *engine_; }
  // The loss scale of the next iteration (1 without loss scaling).
  float loss_scale() const { return loss_scaler_ ? loss_scaler_->scale() : 1.0f; }
  const optim::Optimizer& optimizer() const { return *optimizer_; }
  // --kd: the micro-batches the teacher has run forward for on this rank (tests: none after
  // --kd-stop-iteration, none on the stages without the head).
  int64_t teacher_forwards() const { return teacher_forwards_; }

 private:
  // One forward/backward/step over a global batch of `global_batch` samples (the ramp's size, or
  // --global-batch-size) through the engine; returns the mean per-token loss.
  double train_step(float lr, int64_t global_batch, optim::StepResult& step);
  // The pipeline schedule and the optimizer over this rank's chunks as a step engine, and its step: the
  // schedule's forwards and backwards, the gradients finalised, the optimizer, the losses summed over
  // the ranks (trainer_schedule.cc; the step in trainer.cc).
  class ScheduleEngine;
  std::unique_ptr<StepEngine> make_schedule_engine();
  StepOutcome schedule_step(const GlobalBatch& batch, float lr);
  // The global batch of the next iteration (it grows under --rampup-batch-size, said as Megatron says it).
  int64_t current_global_batch();
  // Runs this rank's pipeline schedule over the micro-batches `batches` (forward only when not
  // training) and returns the sums of the masked token losses (non-zero on the last stage only).
  // per_sample_loss_weight: the batches' loss tokens per sample (model::ForwardContext).
  // (trainer_schedule.cc)
  // settle: read the sums a GPU kept (LossSums::settle) before returning; false leaves that to the caller.
  model::LossSums run_micro_batches(const std::vector<model::MicroBatch>& batches, bool training, float grad_scale,
                                    double per_sample_loss_weight, bool settle = true);
  // The names of the auxiliary losses, as logged: the model's, then with --kd the KD term's.
  std::vector<std::string> auxiliary_loss_names() const;
  // The auxiliary losses of `sums` in the order of those names (the same on every rank).
  std::vector<float> auxiliary_values(const model::LossSums& sums) const;
  // The MoE layers' routing over the interval that a log line ends (collective), then restarts it.
  ExpertLoad interval_expert_load();
  // --kd: builds the teacher on the ranks with the LM head unless distillation is already over.
  void build_teacher();
  // --load: the checkpoint's weights, optimizer state, iteration and data position (trainer_checkpoint.cc).
  void resume();
  // After --load: every model tensor of the checkpoint in `dir` went into some rank's parameters
  // (collective; rank_local: this rank's own checkpoint went into its parameters).
  void check_every_tensor_loaded(const std::string& dir, bool rank_local);
  // Mean per-token loss over --eval-iters global batches of `data`, from its first sample.
  Evaluation evaluate_on(const BatchSource& data);
  // --exit-interval and --exit-duration-in-mins after an iteration, as Megatron's checkpoint_and_decide_exit:
  // saves (with --save, unless `saved` says this iteration's checkpoint was just written), prints Megatron's
  // line and returns true when the loop must stop. Collective over the world with --exit-duration-in-mins.
  bool exit_by_interval_or_duration(bool saved);
  // Per-rank timers of the last log interval, gathered over the world and printed as (min, max) with
  // the measured and theoretical pipeline bubble.
  void log_timers(int64_t iterations);
  // --save's directory and the non-persistent checkpoints' made and checked writable, on every rank (each
  // writes its files), so that an unusable one stops the run before training, not at the first save.
  void prepare_save_directories(int world_rank);
  // The kinds of checkpoint: --save's, and Megatron's non-persistent ones (--non-persistent-ckpt-type).
  enum class SaveKind { Persistent, NonPersistentGlobal, NonPersistentLocal };
  // Saves a checkpoint of the current iteration (collective). With --async-save the files are written on
  // a background thread and the save is finalised by a later finish_pending_save; a save still pending is
  // finished first (one save at a time).
  void save(SaveKind kind = SaveKind::Persistent);
  // The save whose files are being written: the ranks agree (an all-reduce) whether every rank's write
  // has ended, and when all have, the save is finalised (the index, the rename, the tracker; collective).
  // blocking: waits for this rank's write first (the next save, the end of training); else only polls
  // (each step boundary). A write that failed on any rank is an Error on every rank, with that rank's
  // message. Returns whether no save is pending any more.
  bool finish_pending_save(bool blocking);
  // --load: the directory it resumes from (the newest checkpoint of --load and the non-persistent ones;
  // collective with local ones, whose iteration the ranks agree on) and whether it is this rank's own.
  std::pair<std::string, bool> resume_directory();
  // The newest iteration of the local non-persistent checkpoints that every rank has complete at this
  // layout, rolling back the ones that not all completed; -1 when there is none (collective).
  int64_t agreed_local_iteration();
  // The rerun state machine of --rerun-mode and its checks (trainer_rerun.cc): made once, at start-up;
  // after a run of the step, whether to go on to the update (false: re-run it). A stop saves (with
  // --save) the last iteration and throws RerunExit on every rank (collective).
  void make_rerun_state_machine();
  bool rerun_accepts(const model::LossSums& sums, double local_tokens);
  // Whether nothing looks at a step's loss before its update: the rerun machine checks nothing (no NaN or
  // spiky-loss check, no injected errors, not report_stats) and no test fault is injected. The step then
  // reads its loss after the optimizer's launches are queued, with the norm (trainer_rerun.cc).
  bool loss_unchecked_before_update() const;
  // --log-straggler: every rank's times over the interval, gathered, and the report (collective).
  void log_stragglers(double interval_seconds, int64_t iterations);
  // Completes the data-parallel reduction and sums sequence-parallel partial gradients.
  void finalize_gradients();
  void say(const std::string& line);
  // This rank's micro-batch m of the global batch starting at sample `first` (Megatron's sampler:
  // each step of mbs x dp samples is split over the data-parallel ranks).
  model::MicroBatch micro_batch(const BatchSource& data, int64_t first, int64_t m) const;
  // build_batch_sources (train/training_data.h): built on rank 0 first, which caches the sample indices,
  // then loaded by the other ranks.
  void build_datasets();
  // Sums over the data-parallel group (in place).
  void data_parallel_sum(std::vector<float>& values) const;
  // Sums over the pipeline group (the loss lives on the last stage).
  void pipeline_sum(std::vector<float>& values) const;
  // Sums over the context-parallel group (each of its ranks' losses covers its chunks of the sequences).
  void context_parallel_sum(std::vector<float>& values) const;
  Timer start_timer_;  // --exit-duration-in-mins counts from here (Megatron: from the start of pretrain)
  TrainArguments args_;
  std::unique_ptr<comm::ProcessGroup> single_world_;
  comm::ProcessGroup* world_ = nullptr;
  std::unique_ptr<comm::ParallelState> state_;
  parallel::ExpertParallelContext experts_;
  model::LossSums::Routing interval_routing_;  // the MoE layers' routing since the last log line  // the expert groups of state_, for the MoE layers
  parallel::TensorParallelContext tp_;
  parallel::ContextParallelContext cp_;  // the context group of state_ (each sequence split over it)
  model::ParameterSet params_;
  pipeline::ScheduleShape schedule_;
  std::vector<std::unique_ptr<model::LanguageModelChunk>> chunks_;  // this rank's model chunks (one unless interleaved)
  // chunks_ run one token slice at a time by the schedule (TeraPipe across stages, schedule_.slices > 1).
  std::vector<const model::TokenSlicedChunk*> sliced_chunks_;
  std::unique_ptr<pipeline::PipelineP2P> p2p_;            // null without pipeline parallelism
  std::unique_ptr<Teacher> teacher_;  // --kd, on the ranks with the head, until --kd-stop-iteration
  int64_t teacher_forwards_ = 0;
  std::unique_ptr<optim::Optimizer> optimizer_;
  // The step engine of --pipeline-schedule (make_step_engine): the schedule engine over chunks_ and
  // optimizer_, or one that holds the model's modules itself (then it may copy its weights into params_
  // for evaluation, sampling and the log, and optimizer_ stays unused; params_ may be empty).
  std::unique_ptr<StepEngine> engine_;
  optim::DistributedOptimizer* distributed_optimizer_ = nullptr;  // optimizer_, with --use-distributed-optimizer
  std::shared_ptr<const BatchSource> train_data_, valid_data_, test_data_;  // test: null without documents
  std::unique_ptr<data::Tokenizer> text_tokenizer_;  // counts the bytes of evaluated text; null for mock data
  std::unique_ptr<TrainingLog> log_;  // on world rank 0 only
  std::unique_ptr<GroupedGradBuckets> buckets_;  // one GradBuckets per gradient-reduction group
  std::unique_ptr<infer::TrainingSampler> sampler_;  // --sample-interval, made at the first sample
  std::optional<optim::LossScaler> loss_scaler_;      // --fp16, or --loss-scale
  int64_t iteration_ = 0, consumed_samples_ = 0, skipped_iterations_ = 0;
  int64_t skipped_samples_ = 0;  // the skipped iterations' samples: a schedule in samples leaves them out
  int64_t announced_global_batch_ = 0;  // the global batch last used (0: none yet)
  // Accounting since the last log line.
  pipeline::PipelineTimes times_;
  std::optional<ZeroBubbleTiming> zero_bubble_timing_;  // zero bubble: the lists from measured costs
  double reduce_seconds_ = 0, optimizer_seconds_ = 0;
  double ring_wait_seconds_ = 0;  // ring attention's exposed exchange (cp > 1), part of the compute timers
  int peak_live_activations_ = 0;  // most micro-batch activation records (token slices' when sliced) held at once
  int64_t live_activation_bytes_ = 0, peak_activation_bytes_ = 0;  // held by the layer records
  MemoryPrediction memory_;
  int64_t consecutive_nan_iterations_ = 0;
  std::optional<InjectedFault> injected_fault_;  // TESSERA_INJECT_FAULT (tests only)
  std::unique_ptr<RerunStateMachine> rerun_;
  bool exit_condition_met_ = false;
  bool nothing_left_to_train_ = false;  // resumed at or past --train-iters: the loop ran no iteration
  std::vector<double> losses_;
  std::map<std::string, std::vector<double>> auxiliary_loss_history_;
  // The save being written (--async-save) and not yet finalised. Last: destroyed first, it stops and
  // joins its writer before anything else goes.
  struct PendingSave {
    std::unique_ptr<CheckpointWriter> writer;
    SaveKind kind;
    double blocked_seconds = 0;  // the training thread's time on it so far: the copies, the polls
  };
  std::optional<PendingSave> pending_save_;
};

}  // namespace tessera::train
