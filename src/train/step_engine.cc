// The choice of step engine by --pipeline-schedule: the one place that names the engines.
#include "train/step_engine.h"

#include "core/check.h"
#include "train/ouroboros_engine.h"

namespace tessera::train {
namespace {

bool is_ouroboros(const TrainArguments& args) { return args.pipeline_schedule == "ouroboros"; }

}  // namespace

bool engine_holds_model(const TrainArguments& args) {
  return is_ouroboros(args) && args.pipeline_model_parallel_size > 1;
}

void check_resumable(const nlohmann::json& saved_args, const TrainArguments& args) {
  // An Ouroboros checkpoint holds the delayed rule's state beside (on P ranks: instead of) the
  // parameters, which the other schedule cannot continue, and the reverse: refused by name.
  const std::string saved = saved_args.value("pipeline_schedule", std::string("1f1b"));
  TESSERA_CHECK(saved == args.pipeline_schedule, "--load ", args.load, ": the checkpoint was saved with "
                "--pipeline-schedule ", saved, ", this run has --pipeline-schedule ", args.pipeline_schedule,
                saved == "ouroboros" || is_ouroboros(args)
                    ? " (an Ouroboros run resumes only from its own state: weight versions and delayed gradients)"
                    : "");
  if (is_ouroboros(args)) check_ouroboros_checkpoint_layout(saved_args, args);
}

std::unique_ptr<StepEngine> make_step_engine(const TrainArguments& args, StepEngineParts parts) {
  if (!is_ouroboros(args)) return std::move(parts.schedule);
  const bool holds_model = engine_holds_model(args);
  return std::make_unique<OuroborosEngine>(args, *parts.state, *parts.tp, holds_model ? nullptr : parts.params,
                                           holds_model ? nullptr : std::move(parts.schedule));
}

}  // namespace tessera::train
