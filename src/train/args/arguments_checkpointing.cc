// The rules of checkpointing: when the loop saves, what it keeps, and when it saves and exits.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <utility>

#include "train/args/argument_rules.h"
#include "train/args/arguments.h"
#include "train/exit_signal.h"

namespace tessera::train {

namespace fs = std::filesystem;
using rules::require;

namespace {

// Whether two directory names are the same directory (both may not exist yet).
bool same_directory(const std::string& a, const std::string& b) {
  std::error_code ec;
  auto normal = [&](const std::string& dir) {
    fs::path p = fs::weakly_canonical(dir, ec).lexically_normal();
    return p.has_filename() ? p : p.parent_path();  // "x/" is "x"
  };
  const fs::path x = normal(a), y = normal(b);
  return !ec && x == y;
}

// --async-save and Megatron's non-persistent checkpoints. A flag that would do nothing is an error.
void finalize_non_persistent(const TrainArguments& a) {
  require(!a.async_save || !a.save.empty(), "--async-save", "true", "needs --save DIR");
  const std::string& type = a.non_persistent_ckpt_type;
  require(type != "in_memory", "--non-persistent-ckpt-type", type,
          "is not implemented (Megatron's in-memory checkpoints); use local (each node's disk) or global");
  require(type.empty() || type == "global" || type == "local", "--non-persistent-ckpt-type", type,
          "must be one of global, local");
  if (a.non_persistent_save_interval_given) {
    require(a.non_persistent_save_interval > 0, "--non-persistent-save-interval", a.non_persistent_save_interval,
            "must be positive");
    require(!type.empty(), "--non-persistent-save-interval", a.non_persistent_save_interval,
            "needs --non-persistent-ckpt-type global or local");
    // As Megatron's checkpoint_and_decide_exit: non-persistent checkpoints are saved with --save only.
    require(!a.save.empty(), "--non-persistent-save-interval", a.non_persistent_save_interval, "needs --save DIR");
  }
  require(a.non_persistent_global_ckpt_dir.empty() || type == "global", "--non-persistent-global-ckpt-dir",
          a.non_persistent_global_ckpt_dir, "needs --non-persistent-ckpt-type global");
  require(a.non_persistent_local_ckpt_dir.empty() || type == "local", "--non-persistent-local-ckpt-dir",
          a.non_persistent_local_ckpt_dir, "needs --non-persistent-ckpt-type local");
  require(type != "local" || !a.non_persistent_local_ckpt_dir.empty(), "--non-persistent-ckpt-type", type,
          "needs --non-persistent-local-ckpt-dir DIR (a directory on each node's own disk)");
  if (type == "global") {
    // Only the newest non-persistent checkpoint is kept: the directory must not be one of the persistent ones.
    for (const auto& [flag, dir] : {std::pair{"--save", a.save}, std::pair{"--load", a.load}})
      for (const std::string& global : {non_persistent_global_save_dir(a), non_persistent_global_load_dir(a)})
        require(dir.empty() || global.empty() || !same_directory(global, dir), "--non-persistent-global-ckpt-dir",
                global, str_cat("is ", flag, "'s directory: its older non-persistent checkpoints are removed, so it "
                                "must be a directory of its own"));
  }
  if (type == "local") {
    // Each rank resumes from its own files, so it must hold all of its state.
    require(!a.use_distributed_optimizer, "--non-persistent-ckpt-type", type,
            "is not supported with --use-distributed-optimizer yet (a rank holds only its shard of the moments, "
            "and loading assembles them whole); use global");
    require(a.pipeline_schedule != "ouroboros", "--non-persistent-ckpt-type", type,
            "is not supported with --pipeline-schedule ouroboros yet; use global");
  }
}

}  // namespace

std::string non_persistent_global_save_dir(const TrainArguments& a) {
  if (a.non_persistent_ckpt_type != "global") return "";
  if (!a.non_persistent_global_ckpt_dir.empty()) return a.non_persistent_global_ckpt_dir;
  return a.save.empty() ? "" : (fs::path(a.save) / "non_persistent").string();
}

std::string non_persistent_global_load_dir(const TrainArguments& a) {
  if (a.non_persistent_ckpt_type != "global") return "";
  if (!a.non_persistent_global_ckpt_dir.empty()) return a.non_persistent_global_ckpt_dir;
  return a.load.empty() ? "" : (fs::path(a.load) / "non_persistent").string();
}

std::string non_persistent_local_dir(const TrainArguments& a, int world_rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank_%05d", world_rank);
  return (fs::path(a.non_persistent_local_ckpt_dir) / name).string();
}

void finalize_checkpointing(TrainArguments& a) {
  // A missing directory is a fresh run (a warning, or --exit-on-missing-checkpoint's error), but a file
  // is a mistyped path: training from scratch beside it would waste the run.
  require(a.load.empty() || !std::filesystem::exists(a.load) || std::filesystem::is_directory(a.load), "--load",
          a.load, "is a file, not a checkpoint directory (give the directory that --save wrote)");
  require(a.save_interval >= 0, "--save-interval", a.save_interval, "must be >= 0");
  require(a.save_interval == 0 || !a.save.empty(), "--save-interval", a.save_interval, "needs --save DIR");
  require(a.ckpt_keep_last >= 0, "--ckpt-keep-last", a.ckpt_keep_last, "must be >= 0");
  require(a.exit_interval >= 0, "--exit-interval", a.exit_interval, "must be >= 0 (0: never)");
  require(std::isfinite(a.exit_duration_in_mins) && a.exit_duration_in_mins >= 0, "--exit-duration-in-mins",
          a.exit_duration_in_mins, "must be a finite number >= 0 (0: never)");
  finalize_non_persistent(a);
  require(exit_signal_number(a.exit_signal) != 0, "--exit-signal", a.exit_signal,
          "must be one of " + exit_signal_choices());
  // Without the handler the signal would still end the run unsaved: a flag that does nothing is an error.
  require(a.exit_signal == "SIGTERM" || a.exit_signal_handler, "--exit-signal", a.exit_signal,
          "needs --exit-signal-handler");
}

}  // namespace tessera::train
