// The rules of checkpointing: when the loop saves, what it keeps, and when it saves and exits.
#include <cmath>
#include <filesystem>

#include "train/args/argument_rules.h"
#include "train/args/arguments.h"
#include "train/exit_signal.h"

namespace tessera::train {

using rules::require;

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
  require(exit_signal_number(a.exit_signal) != 0, "--exit-signal", a.exit_signal,
          "must be one of " + exit_signal_choices());
  // Without the handler the signal would still end the run unsaved: a flag that does nothing is an error.
  require(a.exit_signal == "SIGTERM" || a.exit_signal_handler, "--exit-signal", a.exit_signal,
          "needs --exit-signal-handler");
}

}  // namespace tessera::train
