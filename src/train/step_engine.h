// The step engine: what turns a global batch into an optimizer step, chosen by --pipeline-schedule
// (make_step_engine). The trainer (train/trainer.h) keeps the loop around it (data, learning rate, loss
// scale, the NaN guard, logging, checkpoints, evaluation's counting) and does not ask which it holds:
//  - the pipeline schedule and the optimizer over the trainer's model (1F1B, interleaved, zero bubble,
//    token slices: Trainer::ScheduleEngine, train/trainer_schedule.cc);
//  - Ouroboros' delayed gradients (train/ouroboros_engine.h), whose driver holds the model's modules.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.h"
#include "comm/parallel_state.h"
#include "model/language_model.h"
#include "optim/optimizer.h"
#include "parallel/tensor_parallel.h"
#include "train/args/arguments.h"

namespace tessera::train {

// A global batch as one rank steps over it.
struct GlobalBatch {
  const std::vector<model::MicroBatch>& micro_batches;  // this rank's, in order
  int64_t samples = 0;                                  // of the whole global batch (every data-parallel rank's)
  // Of the whole global batch: the objective is its mean loss per loss token (train/step_context.h).
  double loss_tokens = 0;
};

// What a step gives the trainer, the same on every rank.
struct StepOutcome {
  float lm_loss_sum = 0;              // the global batch's summed masked token losses (an fp32 value)
  std::vector<float> auxiliary_sums;  // the auxiliary losses' sums, in the order of the trainer's names
  optim::StepResult optimizer;        // the gradient norm, whether the update was skipped
};

// What one rank measured over a log interval, gathered from every rank for the report.
struct RankInterval {
  int stage = 0;                  // its pipeline stage
  float bubble_fraction = 0;      // its schedule's (time - compute) / compute (gathered as fp32)
  int peak_live_activations = 0;  // the most activation records it held at once
  // The most bytes its activation records (and, under zero bubble, its W passes' inputs) held at once,
  // and the schedule's prediction of it (train/memory_report.h).
  float activation_bytes = 0, predicted_activation_bytes = 0;
};

class StepEngine {
 public:
  virtual ~StepEngine() = default;

  // Said once at start-up, after the parameter count: what the engine runs (none where the trainer has
  // said it: the schedule's shape).
  virtual std::vector<std::string> describe() const { return {}; }
  // One optimizer step over the global batch at learning rate `lr` (collective over the groups the
  // engine uses).
  virtual StepOutcome step(const GlobalBatch& batch, float lr) = 0;
  // The model's auxiliary losses (the mtp_k losses), by name in the model's order, where the engine holds
  // the model itself (engine_holds_model: the trainer has no chunks to ask); empty elsewhere.
  virtual std::vector<std::string> auxiliary_loss_names() const { return {}; }
  // Forward only at the current weights (evaluation) over this rank's micro-batches: this rank's loss
  // sums, which the trainer adds over the pipeline, context and data-parallel groups.
  virtual model::LossSums evaluate(const std::vector<model::MicroBatch>& batches, double per_sample_loss_weight) = 0;
  // Checkpoints: the files of the engine's own state this rank writes beside the parameters and their
  // moments (none where those are all of it).
  virtual std::vector<ckpt::ExtraFile> checkpoint_files() const { return {}; }
  // After the parameters and moments of the checkpoint in `dir` were loaded at `iteration`: the engine's
  // own state from its files there. batches(s): this rank's micro-batches of iteration s's global batch;
  // seed: the run's from now on.
  virtual void resume(const std::string& /*dir*/, int64_t /*iteration*/, uint64_t /*seed*/,
                      const std::function<std::vector<model::MicroBatch>(int64_t)>& /*batches*/) {}
  // The log interval report's last line, said by world rank 0 (empty: none); ranks: every rank's
  // figures, in world rank order.
  virtual std::string interval_report(const std::vector<RankInterval>& ranks) const = 0;
};

// Whether the engine --pipeline-schedule names holds this rank's model itself (Ouroboros on P ranks: its
// modules), so that the trainer builds no pipeline chunks or stage-to-stage transport and its parameters
// stay empty.
bool engine_holds_model(const TrainArguments& args);

// --load: refuses, naming what differs, a checkpoint that this run's engine cannot continue: one saved
// under another --pipeline-schedule (an Ouroboros state continues only under Ouroboros, and only at the
// layout that saved it, which is checked by flag before any tensor is read).
void check_resumable(const nlohmann::json& saved_args, const TrainArguments& args);

// What an engine is built from besides the arguments. Not owned, but `schedule`.
struct StepEngineParts {
  comm::ParallelState* state = nullptr;  // this rank's place and groups
  const parallel::TensorParallelContext* tp = nullptr;
  model::ParameterSet* params = nullptr;  // the trainer's model (empty where engine_holds_model)
  std::unique_ptr<StepEngine> schedule;   // the pipeline schedule and the optimizer over `params`
};

// The engine --pipeline-schedule names: 1f1b, the schedule itself; ouroboros, the delayed-gradient rule
// (in one process over the schedule's model, which it copies its weights into for evaluation).
std::unique_ptr<StepEngine> make_step_engine(const TrainArguments& args, StepEngineParts parts);

}  // namespace tessera::train
