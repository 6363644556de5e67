// --pipeline-schedule ouroboros as the trainer's step engine (train/step_engine.h): the driver
// (train/ouroboros_driver.h) holds this rank's modules and steps them by the delayed-gradient rule. In one
// process it copies their weights into the trainer's model after each step and on resume, so that
// evaluation, sampling and the log read the trained model as any run's; on P ranks the trainer's model is
// empty and evaluation runs forward through the modules around the ring.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "train/ouroboros_driver.h"
#include "train/step_engine.h"

namespace tessera::train {

class OuroborosEngine final : public StepEngine {
 public:
  // whole: the trainer's model and the schedule engine over it (one process), which evaluates; null on P
  // ranks (engine_holds_model). Builds this rank's modules (collective over nothing).
  OuroborosEngine(const TrainArguments& args, comm::ParallelState& state, const parallel::TensorParallelContext& tp,
                  model::ParameterSet* whole, std::unique_ptr<StepEngine> whole_engine);

  std::vector<std::string> describe() const override { return description_; }
  std::vector<std::string> auxiliary_loss_names() const override { return driver_->auxiliary_loss_names(); }
  StepOutcome step(const GlobalBatch& batch, float lr) override;
  model::LossSums evaluate(const std::vector<model::MicroBatch>& batches, double per_sample_loss_weight) override;
  // Every rank writes its modules' delayed state (replicas differ in their waiting gradients).
  std::vector<ckpt::ExtraFile> checkpoint_files() const override;
  // The delayed rule's state; the pending mini-batches' forwards run again.
  void resume(const std::string& dir, int64_t iteration, uint64_t seed,
              const std::function<std::vector<model::MicroBatch>(int64_t)>& batches) override;
  // What the delays keep on this rank (docs/ouroboros.md, "What each module keeps").
  std::string interval_report(const std::vector<RankInterval>& ranks) const override;

  OuroborosDriver& driver() { return *driver_; }

 private:
  std::unique_ptr<OuroborosDriver> driver_;
  model::ParameterSet* whole_;
  std::unique_ptr<StepEngine> whole_engine_;
  int64_t micro_batches_;      // of a global batch on this rank: what an evaluation on P ranks runs at once
  std::string file_name_;      // this rank's state file in a checkpoint
  std::string load_;           // --load (for its errors)
  std::vector<std::string> description_;
};

// The driver of `engine` when it is Ouroboros' (tests), else null.
OuroborosDriver* ouroboros_driver(StepEngine& engine);

// An Ouroboros checkpoint is the delayed rule's state of the layout that saved it (on P ranks it has no
// Megatron model files: the modules are not the trainer's parameters), so another pipeline or tensor size
// is refused by flag before any tensor is read, rather than as a tensor or file it lacks. The state files
// check the rest.
void check_ouroboros_checkpoint_layout(const nlohmann::json& saved_args, const TrainArguments& args);

}  // namespace tessera::train
