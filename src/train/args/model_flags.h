// Model flags given to `tessera generate`, `serve` and `eval` (the flags of `tessera train`, as a
// Megatron launch script passes them) against the configuration a checkpoint records. The checkpoint
// defines the model; a flag given with another value is a conflict (an error, or with
// --use-checkpoint-args, Megatron's flag, a note that the checkpoint's value is used).
#pragma once

#include <string>
#include <vector>

#include "model/config.h"
#include "train/args/arguments.h"

namespace tessera::train {

struct ModelFlagConflict {
  std::string flag, given, saved;  // e.g. "--hidden-size", "64", "32"
};

// The model flags given on `app`'s command line (added by add_model_flags into `given`) whose value
// differs from the checkpoint's `saved` configuration. Flags that do not change what the saved weights
// compute (dropouts, initialisation, vocabulary padding) never conflict; --num-query-groups counts only
// with --group-query-attention, as in training. --seq-length is compared when `app` has it.
std::vector<ModelFlagConflict> model_flag_conflicts(const CLI::App& app, const TrainArguments& given,
                                                    const model::ModelConfig& saved);

// Every difference between the model a run builds (`run`, its flags finalised) and the one a checkpoint
// holds (`saved`) in what the weights mean, each named by the flag that sets it: what `tessera train
// --load` refuses (Megatron's check_checkpoint_args). Run settings (dropouts, initialisation, sequence
// length, vocabulary padding, capacity and auxiliary losses) are not compared. `changes_shapes`: the
// weights' names or shapes differ too, so not even --finetune can load them.
struct ModelDifference : ModelFlagConflict {
  bool changes_shapes = false;
};
std::vector<ModelDifference> model_differences(const model::ModelConfig& run, const model::ModelConfig& saved);

// The differences between the run `a` (finalised) and the latest checkpoint of `dir` (the one its --load
// resumes from: newest_shared_checkpoint_dir, or a rank's local non-persistent directory), the
// tokenizer's type and files included (against the copies the checkpoint carries); empty without one.
// finalize_resume refuses them (under --finetune those that change shapes), the Trainer states the rest.
std::vector<ModelDifference> resumed_model_differences(const TrainArguments& a, const std::string& dir);

// "--hidden-size=64 (the checkpoint's: 32); --swiglu=true (the checkpoint's: false)".
std::string describe(const std::vector<ModelFlagConflict>& conflicts);
std::string describe(const std::vector<ModelDifference>& differences);

}  // namespace tessera::train
