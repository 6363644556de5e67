// The resilience flags (issue 58), with Megatron's names and defaults: the rerun state machine
// (train/rerun_state_machine.h) and the straggler report (train/straggler_report.h).
#include <CLI/CLI.hpp>

#include "train/args/argument_rules.h"
#include "train/args/arguments.h"
#include "train/rerun_state_machine.h"

namespace tessera::train {

using rules::require;

void add_resilience_flags(CLI::App& app, TrainArguments& a) {
  app.add_option("--rerun-mode", a.rerun_mode,
                 "disabled, validate_results (default: a failed check re-runs the step; the same result exits 16, "
                 "another 17) or report_stats (every step re-run, differences reported, training goes on)");
  // Megatron's flag is --no-check-for-nan-in-loss-and-grad (on by default); the positive one is accepted too.
  app.add_flag("--check-for-nan-in-loss-and-grad,!--no-check-for-nan-in-loss-and-grad",
               a.check_for_nan_in_loss_and_grad,
               "Check each rank's loss for NaN and Inf and its gradients for NaN before the update (default on)");
  app.add_flag("--check-for-spiky-loss", a.check_for_spiky_loss,
               "Check for a loss 10x the largest of the first 100 losses before the update");
  app.add_option("--error-injection-rate", a.error_injection_rate,
                 "Inject a failed check about once in this many checks per rank (0: never; tests the rerun machine)");
  app.add_option("--error-injection-type", a.error_injection_type,
                 "What the re-run of an injected failure finds: correct_result, transient_error (default) or "
                 "persistent_error");
  app.add_option("--result-rejected-tracker-filename", a.result_rejected_tracker_filename,
                 "Append a line per rejected result (rank, iteration, status, result, check) to this file");
  app.add_flag("--log-straggler", a.log_straggler,
               "At each log line, report the slowest and fastest ranks' compute time against the median");
  app.add_option("--straggler-minmax-count", a.straggler_minmax_count,
                 "How many slowest and fastest ranks --log-straggler names (default 1)");
  app.add_flag("--disable-straggler-on-startup", a.disable_straggler_on_startup,
               "Start with the straggler report off (Tessera has no control port to turn it on: no report)");
}

void finalize_resilience(TrainArguments& a) {
  const RerunMode mode = parse_rerun_mode(a.rerun_mode);  // an Error naming the flag and value
  parse_injected_error(a.error_injection_type);
  require(a.error_injection_rate >= 0, "--error-injection-rate", a.error_injection_rate, "must be >= 0");
  require(a.error_injection_rate == 0 || mode != RerunMode::Disabled, "--error-injection-rate",
          a.error_injection_rate, "needs --rerun-mode validate_results or report_stats (disabled re-runs nothing)");
  require(a.straggler_minmax_count >= 1, "--straggler-minmax-count", a.straggler_minmax_count, "must be positive");
  if (a.pipeline_schedule == "ouroboros") {  // its driver steps inside itself: no state to re-run from yet
    const auto not_yet = [](bool ok, const char* what, const std::string& value) {
      require(ok, what, value, "cannot be combined with --pipeline-schedule ouroboros yet (issue 58)");
    };
    not_yet(mode != RerunMode::ReportStats, "--rerun-mode", a.rerun_mode);
    not_yet(!a.check_for_spiky_loss, "--check-for-spiky-loss", "true");
    not_yet(a.error_injection_rate == 0, "--error-injection-rate", str_cat(a.error_injection_rate));
  }
}

}  // namespace tessera::train
