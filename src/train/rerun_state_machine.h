// Megatron-Core's rerun state machine (megatron/core/rerun_state_machine.py), for one step at a time:
// after the forward and backward of an iteration, and before the optimizer touches the parameters or
// its state, each rank checks its own results (NaN or Inf in its loss, NaN in its gradients, and with
// --check-for-spiky-loss a loss ten times the largest of the first losses seen). When any rank's check
// fires, every rank re-runs the step from the same state on the same micro-batches (the ranks agree by
// an all-reduce of their flags, so none is left waiting), and the re-run tells what it was:
// - the same result: a deterministic problem, in the data or the model (or a GPU that is persistently
//   wrong): --rerun-mode validate_results stops every rank with Megatron's EXIT_CODE_RESUME_TO_DISAMBIGUATE
//   (16), to be resumed elsewhere from the checkpoint saved before the exit;
// - another result: a transient fault: validate_results stops with EXIT_CODE_FAILED_ON_RESULT_VALIDATION
//   (17), and report_stats goes on with the re-run's result.
// Under report_stats every step is re-run, as Megatron's, and a re-run that differs is reported.
// --rerun-mode disabled still checks and stops at the first failure (exit 1), as Megatron raises.
// Not here: Megatron's third run, from the checkpoint on another GPU, that tells a faulty GPU from a
// correct result; the checkpoint saved at the exit is where it would start.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/check.h"

namespace tessera::comm {
class ProcessGroup;
}

namespace tessera::train {

enum class RerunMode { Disabled, ValidateResults, ReportStats };
// --error-injection-type: what the re-run of an injected failure finds (Megatron's RerunDiagnostic).
// correct_result and persistent_error differ only on Megatron's third run (not here): both reproduce.
enum class InjectedError { CorrectResult, TransientError, PersistentError };

inline constexpr int kExitResumeToDisambiguate = 16;    // Megatron's EXIT_CODE_RESUME_TO_DISAMBIGUATE
inline constexpr int kExitFailedOnResultValidation = 17;  // Megatron's EXIT_CODE_FAILED_ON_RESULT_VALIDATION

// "--rerun-mode" and "--error-injection-type" values; an Error naming the flag and value otherwise.
RerunMode parse_rerun_mode(const std::string& value);
InjectedError parse_injected_error(const std::string& value);

struct RerunOptions {
  RerunMode mode = RerunMode::ValidateResults;  // Megatron's default
  bool check_nan = true;                        // --check-for-nan-in-loss-and-grad (Megatron's default)
  bool check_grads = true;                      // off under loss scaling: its skipped steps handle overflow
  bool check_spiky_loss = false;                // --check-for-spiky-loss
  int64_t error_injection_rate = 0;             // about one injected failure in this many checks per rank
  InjectedError error_injection_type = InjectedError::TransientError;
  uint64_t seed = 1234;                         // the injections' draws (the same on every rank)
  // Megatron's is_unexpectedly_large: the loss is spiky from this many times the largest of the first
  // spiky_loss_samples losses (fewer via TESSERA_SPIKY_LOSS_SAMPLES, for tests).
  double spiky_loss_factor = 10;
  int64_t spiky_loss_samples = 100;
  std::string tracker_file;  // --result-rejected-tracker-filename: one line per rejected result and rank
};

// What the checks look at on this rank after a run of the step.
struct StepObservation {
  std::optional<double> loss;  // this rank's mean loss per token; none on ranks that hold no loss
  double grad_sum_of_squares = 0;  // of this rank's gradients (NaN when any is NaN)
};

// The checks, as bits of a rank's flags.
enum RerunCheck : uint32_t { kNanLoss = 1, kInfLoss = 2, kNanGrad = 4, kSpikyLoss = 8, kInjected = 16 };
// Megatron's messages for the bits of `checks` ("found NaN in local forward loss calculation", ...).
std::string describe_checks(uint32_t checks, InjectedError injected);

// Megatron's is_unexpectedly_large: the largest |loss| of the first `samples` finite losses, then a loss
// at least `factor` times it is a spike (none while sampling).
class SpikyLossDetector {
 public:
  SpikyLossDetector(double factor, int64_t samples) : factor_(factor), samples_(samples) {}
  bool is_spike(double loss) const;
  void record(double loss);  // an accepted step's loss
  double max_sampled() const { return max_; }

 private:
  double factor_;
  int64_t samples_, seen_ = 0;
  double max_ = 0;
};

// What the trainer does after a run of the step (the same on every rank).
struct RerunDecision {
  enum class Action { Accept, Rerun, Stop } action = Action::Accept;
  int exit_code = 0;    // Stop: 16, 17, or 1 (--rerun-mode disabled)
  std::string message;  // to print on the reporting rank ("" when there is nothing to say)
};

// Thrown on every rank when the machine stops the run: the command exits with `code`.
class RerunExit : public Error {
 public:
  RerunExit(int code, const std::string& message) : Error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

class RerunStateMachine {
 public:
  // world: every rank of the job (null: this rank alone); rank: this rank's, named in the messages.
  RerunStateMachine(RerunOptions options, comm::ProcessGroup* world, int rank);

  // Before the first run of iteration `iteration` (1-based).
  void begin_iteration(int64_t iteration);
  // After a run of the step (the first or the re-run): collective over the world when a world was given.
  RerunDecision after_run(const StepObservation& observation);
  // Whether the step's first run is being re-run (the trainer's state must be that of the first run).
  bool rerunning() const { return rerunning_; }
  const RerunOptions& options() const { return options_; }

 private:
  uint32_t checks_of(const StepObservation& o);
  // Every rank's values: all-reduced (summed) over the world, each rank filling its own slots.
  std::vector<float> agree(const std::vector<float>& mine) const;
  void log_to_tracker(const char* status, const StepObservation& o, uint32_t checks) const;
  std::string flagged_ranks(const std::vector<float>& flags) const;

  RerunOptions options_;
  comm::ProcessGroup* world_;
  int rank_, world_size_;
  int64_t iteration_ = 0;
  bool rerunning_ = false;
  uint32_t initial_checks_ = 0;            // this rank's flags on the first run
  StepObservation initial_;                // this rank's results on the first run
  std::vector<float> initial_flags_;       // every rank's flags on the first run
  std::optional<InjectedError> injected_;  // injected on this rank in this iteration
  SpikyLossDetector spiky_;
  std::mt19937_64 draws_;
};

}  // namespace tessera::train
