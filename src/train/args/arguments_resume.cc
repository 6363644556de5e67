// The rules of --load: a checkpoint resumes only into the model it holds, with the tokenizer it was
// trained with (Megatron's check_checkpoint_args), checked from its index before any work. --finetune
// starts a new run from the weights: what changes the weights' shapes is still refused (the loader could
// not place them), the rest is allowed and stated at start-up (Trainer, resumed_model_differences).
#include <filesystem>
#include <map>
#include <tuple>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_tokenizer.h"
#include "train/args/argument_rules.h"
#include "train/args/arguments.h"
#include "train/args/model_flags.h"

namespace tessera::train {
namespace fs = std::filesystem;

std::string newest_shared_checkpoint_dir(const TrainArguments& a) {
  if (a.load.empty()) return "";
  std::error_code ec;
  auto iteration = [&](const std::string& dir) {
    return fs::is_directory(dir, ec) ? ckpt::latest_checkpointed_iteration(dir) : int64_t{-1};
  };
  const int64_t persistent = iteration(a.load);
  const std::string global = non_persistent_global_load_dir(a);
  // As Megatron's _load_base_checkpoint: a non-persistent checkpoint as new as the persistent one wins.
  if (!global.empty()) {
    const int64_t non_persistent = iteration(global);
    if (non_persistent >= 0 && non_persistent >= persistent) return global;
  }
  return persistent >= 0 ? a.load : "";
}

std::vector<ModelDifference> resumed_model_differences(const TrainArguments& a, const std::string& dir) {
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(dir, ec) || ckpt::latest_checkpointed_iteration(dir) < 0) return {};
  const nlohmann::json recorded = ckpt::latest_checkpoint_args(dir);
  if (!recorded.contains("model")) return {};
  model::ModelConfig saved;
  try {
    saved = model::config_from_json(recorded.at("model"));
  } catch (const Error& e) {
    throw Error(str_cat("--load=", dir, ": ", e.what()));
  }
  std::vector<ModelDifference> out = model_differences(a.model, saved);
  // The tokenizer: its type, and the files given against the copies the checkpoint carries (older
  // checkpoints carry none: their vocabulary size, compared above, is what can be checked).
  const std::string saved_type = recorded.value("tokenizer_type", std::string());
  if (!saved_type.empty() && saved_type != a.tokenizer_type)
    out.push_back({{"--tokenizer-type", a.tokenizer_type, saved_type}, false});
  const std::map<std::string, std::string> carried = ckpt::latest_tokenizer_files(dir);
  for (const auto& [key, flag, given] : {std::tuple{"vocab_file", "--vocab-file", &a.vocab_file},
                                         std::tuple{"merge_file", "--merge-file", &a.merge_file},
                                         std::tuple{"tokenizer_model", "--tokenizer-model", &a.tokenizer_model}}) {
    const auto copy = carried.find(key);
    if (copy == carried.end() || given->empty() || ckpt::same_file_contents(*given, copy->second)) continue;
    out.push_back({{flag, *given, str_cat("another file, carried as ", copy->second)}, false});
  }
  return out;
}

void check_resumed_model(const TrainArguments& a, const std::string& dir) {
  const std::vector<ModelDifference> differences = resumed_model_differences(a, dir);
  if (differences.empty()) return;
  // A non-persistent checkpoint is named beside --load.
  const std::string load = dir == a.load ? a.load : str_cat(a.load, " (its newest checkpoint: ", dir, ")");
  if (!a.finetune)
    throw Error(str_cat("--load=", load, ": the checkpoint holds another model or tokenizer than these flags give: ",
                        describe(differences), ". Give the checkpoint's values to resume it, or --finetune to start a "
                        "new run from its weights"));
  std::vector<ModelDifference> shapes;
  for (const ModelDifference& d : differences)
    if (d.changes_shapes) shapes.push_back(d);
  if (!shapes.empty())
    throw Error(str_cat("--load=", load, " --finetune: ", describe(shapes),
                        ": the checkpoint's weights have other names or shapes than this model's, so they cannot be "
                        "loaded into it"));
}

void finalize_resume(TrainArguments& a) { check_resumed_model(a, newest_shared_checkpoint_dir(a)); }

}  // namespace tessera::train
