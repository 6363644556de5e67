#include "train/rerun_state_machine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <utility>

#include "comm/process_group.h"
#include "core/tensor.h"

namespace tessera::train {

RerunMode parse_rerun_mode(const std::string& value) {
  if (value == "disabled") return RerunMode::Disabled;
  if (value == "validate_results") return RerunMode::ValidateResults;
  if (value == "report_stats") return RerunMode::ReportStats;
  throw Error(str_cat("--rerun-mode=", value, ": must be one of disabled, validate_results, report_stats"));
}

InjectedError parse_injected_error(const std::string& value) {
  if (value == "correct_result") return InjectedError::CorrectResult;
  if (value == "transient_error") return InjectedError::TransientError;
  if (value == "persistent_error") return InjectedError::PersistentError;
  throw Error(str_cat("--error-injection-type=", value,
                      ": must be one of correct_result, transient_error, persistent_error"));
}

namespace {

const char* injected_name(InjectedError e) {
  switch (e) {
    case InjectedError::CorrectResult: return "correct_result";
    case InjectedError::TransientError: return "transient_error";
    case InjectedError::PersistentError: return "persistent_error";
  }
  return "?";
}

// Megatron's _compare_floats at tolerance 0: equal, or both NaN.
bool same_value(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

bool same_result(const StepObservation& a, const StepObservation& b) {
  if (a.loss.has_value() != b.loss.has_value()) return false;
  if (a.loss && !same_value(*a.loss, *b.loss)) return false;
  return same_value(a.grad_sum_of_squares, b.grad_sum_of_squares);
}

std::string value_text(const StepObservation& o) {
  return str_cat("loss=", o.loss ? str_cat(*o.loss) : std::string("none"), " grad_sum_of_squares=",
                 o.grad_sum_of_squares);
}

}  // namespace

std::string describe_checks(uint32_t checks, InjectedError injected) {
  std::string out;
  const auto add = [&](uint32_t bit, const std::string& text) {
    if (checks & bit) out += str_cat(out.empty() ? "" : ", ", text);
  };
  add(kNanLoss, "found NaN in local forward loss calculation");
  add(kInfLoss, "found Inf in local forward loss calculation");
  add(kNanGrad, "found NaN in local grad norm");
  add(kSpikyLoss, "Spiky loss");
  add(kInjected, str_cat("injected ", injected_name(injected), " (--error-injection-rate)"));
  return out;
}

bool SpikyLossDetector::is_spike(double loss) const {
  const double v = std::fabs(loss);
  if (!std::isfinite(v) || seen_ < samples_) return false;  // NaN and Inf are the NaN check's
  return v >= max_ * factor_;
}

void SpikyLossDetector::record(double loss) {
  const double v = std::fabs(loss);
  if (!std::isfinite(v) || seen_ >= samples_) return;
  max_ = std::max(max_, v);
  ++seen_;
}

RerunStateMachine::RerunStateMachine(RerunOptions options, comm::ProcessGroup* world, int rank)
    : options_(std::move(options)),
      world_(world),
      rank_(rank),
      world_size_(world ? world->size() : rank + 1),  // alone: the slots up to its own
      spiky_(options_.spiky_loss_factor, options_.spiky_loss_samples),
      draws_(options_.seed) {
  if (!options_.tracker_file.empty()) {  // as Megatron: a log that cannot be appended to stops the start
    std::ofstream probe(options_.tracker_file, std::ios::app);
    TESSERA_CHECK(probe.good(), "--result-rejected-tracker-filename=", options_.tracker_file,
                  ": cannot be appended to");
  }
}

void RerunStateMachine::begin_iteration(int64_t iteration) {
  iteration_ = iteration;
  rerunning_ = false;
  initial_checks_ = 0;
  injected_.reset();
}

uint32_t RerunStateMachine::checks_of(const StepObservation& o) {
  uint32_t c = 0;
  if (options_.check_nan) {
    if (o.loss && std::isnan(*o.loss)) c |= kNanLoss;
    if (o.loss && std::isinf(*o.loss)) c |= kInfLoss;
    if (options_.check_grads && std::isnan(o.grad_sum_of_squares)) c |= kNanGrad;
  }
  if (options_.check_spiky_loss && o.loss && spiky_.is_spike(*o.loss)) c |= kSpikyLoss;
  // Megatron's RerunErrorInjector: every rank draws the same number, offset by its rank, so that at a
  // rate of N one rank in N fails a given check on average; not under disabled (Megatron's neither).
  if (options_.error_injection_rate > 0 && options_.mode != RerunMode::Disabled) {
    const auto rate = static_cast<uint64_t>(options_.error_injection_rate);
    if ((draws_() % rate + static_cast<uint64_t>(rank_)) % rate == 0) {
      c |= kInjected;
      injected_ = options_.error_injection_type;
    }
  }
  return c;
}

std::vector<float> RerunStateMachine::agree(const std::vector<float>& mine) const {
  if (world_ == nullptr || world_->size() == 1) return mine;
  Tensor t = Tensor::empty({static_cast<int64_t>(mine.size())}, DType::F32, Device::cpu());  // host flags
  std::copy(mine.begin(), mine.end(), t.host_f32());
  world_->all_reduce(t);
  return std::vector<float>(t.host_f32(), t.host_f32() + t.numel());
}

std::string RerunStateMachine::flagged_ranks(const std::vector<float>& flags) const {
  std::string out;
  for (int r = 0; r < world_size_; ++r)
    if (const auto c = static_cast<uint32_t>(flags[r]); c != 0)
      out += str_cat(out.empty() ? "" : "; ", "iteration ", iteration_, ", rank ", r, ": ",
                     describe_checks(c, options_.error_injection_type));
  return out;
}

void RerunStateMachine::log_to_tracker(const char* status, const StepObservation& o, uint32_t checks) const {
  if (options_.tracker_file.empty()) return;
  // Megatron's line (ts, node, device, jobID, rank, iteration, status, result, message), parsed by its
  // get_skipped_iterations_from_tracker_file.
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char ts[32];
  std::strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", std::gmtime(&now));
  const char* host = std::getenv("HOSTNAME");
  const char* job = std::getenv("SLURM_JOBID");
  std::ofstream out(options_.tracker_file, std::ios::app);
  out << "ts=" << ts << " node=" << (host ? host : "localhost") << " device=cpu jobID=" << (job ? job : "N/A")
      << " rank=" << rank_ << " iteration=" << iteration_ << " status=" << status << " result=" << value_text(o)
      << " message='" << describe_checks(checks, options_.error_injection_type) << "'\n";
}

RerunDecision RerunStateMachine::after_run(const StepObservation& o) {
  using Action = RerunDecision::Action;
  RerunDecision d;
  if (!rerunning_) {
    const uint32_t checks = checks_of(o);
    std::vector<float> mine(static_cast<size_t>(world_size_), 0.0f);
    mine[static_cast<size_t>(rank_)] = static_cast<float>(checks);
    const std::vector<float> flags = agree(mine);
    const bool any = std::any_of(flags.begin(), flags.end(), [](float f) { return f != 0; });
    if (checks) log_to_tracker(options_.mode == RerunMode::Disabled ? "rerun_disabled" : "initial_run", o, checks);
    if (!any && options_.mode != RerunMode::ReportStats) {
      if (o.loss) spiky_.record(*o.loss);
      return d;
    }
    if (options_.mode == RerunMode::Disabled) {
      d.action = Action::Stop;
      d.exit_code = 1;
      d.message = str_cat("rerun: ", flagged_ranks(flags), " (--rerun-mode disabled: stopping, as Megatron raises)");
      return d;
    }
    initial_ = o;
    initial_checks_ = checks;
    initial_flags_ = flags;
    rerunning_ = true;
    d.action = Action::Rerun;
    if (any)
      d.message = str_cat("rerun: ", flagged_ranks(flags),
                          "; re-running the step from the same state on the same micro-batches");
    return d;
  }

  // The re-run: did each rank that failed a check get the same result again?
  bool reproduced = same_result(initial_, o);
  if (injected_) reproduced = *injected_ != InjectedError::TransientError;  // Megatron's maybe_miscompare
  std::vector<float> mine(2 * static_cast<size_t>(world_size_), 0.0f);
  mine[static_cast<size_t>(rank_)] = !reproduced ? 1.0f : 0.0f;  // differs
  mine[static_cast<size_t>(world_size_ + rank_)] = initial_checks_ && reproduced ? 1.0f : 0.0f;
  const std::vector<float> outcome = agree(mine);
  if (initial_checks_)
    log_to_tracker(reproduced ? "first_rerun_reproducible" : "first_rerun_not_reproducible", o, initial_checks_);
  rerunning_ = false;
  std::string differs, persistent;
  std::vector<float> persistent_flags(static_cast<size_t>(world_size_), 0.0f);
  for (int r = 0; r < world_size_; ++r) {
    if (outcome[static_cast<size_t>(r)] != 0) differs += str_cat(differs.empty() ? "rank " : ", ", r);
    if (outcome[static_cast<size_t>(world_size_ + r)] != 0) persistent_flags[r] = initial_flags_[r];
  }
  persistent = flagged_ranks(persistent_flags);
  const bool any_flagged = std::any_of(initial_flags_.begin(), initial_flags_.end(), [](float f) { return f != 0; });
  if (options_.mode == RerunMode::ReportStats) {  // the re-run's result is the step's
    if (!differs.empty())
      d.message = str_cat("rerun: iteration ", iteration_, ": ", differs, ": the re-run's result differs from the "
                          "first run's (a transient fault); going on with the re-run's result");
    if (!persistent.empty())
      d.message += str_cat(d.message.empty() ? "" : "\n", "rerun: ", persistent,
                           ": reproduced by the re-run (a persistent, deterministic problem: the data or the model); "
                           "going on (--rerun-mode report_stats)");
    if (!any_flagged && o.loss) spiky_.record(*o.loss);
    return d;
  }
  d.action = Action::Stop;
  if (!persistent.empty()) {
    d.exit_code = kExitResumeToDisambiguate;
    d.message = str_cat("rerun: ", persistent, ": reproduced by the re-run: a persistent, deterministic problem "
                        "(the data or the model, or a persistently faulty device). Exiting with code ", d.exit_code,
                        " (Megatron's EXIT_CODE_RESUME_TO_DISAMBIGUATE): resume from the checkpoint, elsewhere, "
                        "to re-run the iteration");
  } else {
    d.exit_code = kExitFailedOnResultValidation;
    d.message = str_cat("rerun: ", flagged_ranks(initial_flags_), ": not reproduced by the re-run (", differs,
                        " got another result): a transient fault. Exiting with code ", d.exit_code,
                        " (Megatron's EXIT_CODE_FAILED_ON_RESULT_VALIDATION): restart from the checkpoint");
  }
  return d;
}

}  // namespace tessera::train
