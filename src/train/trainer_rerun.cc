// The trainer's side of the resilience features (issue 58): what the rerun state machine's checks look
// at after each run of a step, what a stop does (train/rerun_state_machine.h), and the straggler report
// at the log interval (train/straggler_report.h).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>

#include "ckpt/checkpoint.h"
#include "kernels/adamw.h"
#include "kernels/tensor_ops.h"
#include "pipeline/schedules.h"
#include "train/straggler_report.h"
#include "train/trainer.h"

namespace tessera::train {

namespace {

// Testing hook, not a flag: TESSERA_INJECT_LOSS="RANK:ITERATION:KIND" injects a fault on world rank RANK
// at training iteration ITERATION (1-based). In the loss its checks see: nan_once (NaN on the first run
// only, a transient fault), nan (NaN on every run, a deterministic one), spike (1000 times the loss,
// every run), bitflip_once and bitflip (bit 29, an exponent bit, of the loss as a float flipped: 2^64
// times any loss from 2 up, a spike; on the first run only or on every run). In the state: grad_bitflip_once
// flips bit 30, the exponent's top bit, of the rank's first gradient element on the first run only (a
// silent corruption that no check sees; only report_stats' re-run tells it).
struct InjectedLoss {
  int rank = 0;
  int64_t iteration = 0;
  std::string kind;
};

std::optional<InjectedLoss> injected_loss_from_environment() {
  const char* value = std::getenv("TESSERA_INJECT_LOSS");
  if (value == nullptr || *value == '\0') return std::nullopt;
  std::istringstream in(value);
  InjectedLoss f;
  char colon1 = 0, colon2 = 0;
  in >> f.rank >> colon1 >> f.iteration >> colon2 >> f.kind;
  const bool known = f.kind == "nan_once" || f.kind == "nan" || f.kind == "spike" || f.kind == "bitflip_once" ||
                     f.kind == "bitflip" || f.kind == "grad_bitflip_once";
  TESSERA_CHECK(in && colon1 == ':' && colon2 == ':' && known && f.rank >= 0 && f.iteration >= 1, "TESSERA_INJECT_LOSS=",
                value, ": expected RANK:ITERATION:nan_once|nan|spike|bitflip_once|bitflip|grad_bitflip_once (iteration from 1)");
  return f;
}

float flip_float_bit(float v, int bit) {
  uint32_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  bits ^= 1u << bit;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

// Flips `bit` of the first element of `t` (F32, on any device) through a host copy.
void flip_first_element_bit(const Tensor& t, int bit) {
  const Tensor first = t.flat_range(0, 1);
  Tensor host = Tensor::empty({1}, DType::F32, Device::cpu());
  kernels::transfer(host, first);
  host.host_f32()[0] = flip_float_bit(host.host_f32()[0], bit);
  kernels::transfer(first, host);
}

// TESSERA_SPIKY_LOSS_SAMPLES (tests): fewer than Megatron's 100 losses sampled before the spiky-loss check.
int64_t spiky_loss_samples_from_environment() {
  const char* value = std::getenv("TESSERA_SPIKY_LOSS_SAMPLES");
  if (value == nullptr || *value == '\0') return 100;
  char* end = nullptr;
  const long long n = std::strtoll(value, &end, 10);
  TESSERA_CHECK(*end == '\0' && n > 0, "TESSERA_SPIKY_LOSS_SAMPLES=", value, ": expected a positive count");
  return n;
}

}  // namespace

void Trainer::make_rerun_state_machine() {
  RerunOptions o;
  o.mode = parse_rerun_mode(args_.rerun_mode);
  // Under --pipeline-schedule ouroboros the driver updates inside its own step: nothing to re-run from.
  o.check_nan = args_.check_for_nan_in_loss_and_grad && args_.pipeline_schedule != "ouroboros";
  // Under loss scaling, non-finite gradients are the scaler's overflows: skipped steps, not failures.
  o.check_grads = !loss_scaler_;
  o.check_spiky_loss = args_.check_for_spiky_loss;
  o.error_injection_rate = args_.error_injection_rate;
  o.error_injection_type = parse_injected_error(args_.error_injection_type);
  o.seed = args_.seed;
  o.spiky_loss_samples = spiky_loss_samples_from_environment();
  o.tracker_file = args_.result_rejected_tracker_filename;
  rerun_ = std::make_unique<RerunStateMachine>(o, world_, state_->world_rank());
  if (o.mode != RerunMode::ValidateResults || o.check_spiky_loss || o.error_injection_rate > 0)
    say(str_cat(" > rerun state machine: --rerun-mode ", args_.rerun_mode, ", checks: ",
                o.check_nan ? (o.check_grads ? "NaN/Inf loss, NaN gradients" : "NaN/Inf loss") : "none",
                o.check_spiky_loss ? ", spiky loss" : "",
                o.error_injection_rate > 0
                    ? str_cat(", injecting ", args_.error_injection_type, " about once in ", o.error_injection_rate,
                              " checks per rank")
                    : std::string()));
}

bool Trainer::loss_unchecked_before_update() const {
  const RerunOptions& o = rerun_->options();
  return !o.check_nan && !o.check_spiky_loss && o.error_injection_rate == 0 && o.mode != RerunMode::ReportStats &&
         !injected_loss_from_environment() && args_.inject_nan_at_iterations.empty();
}

bool Trainer::rerun_accepts(const model::LossSums& sums, double local_tokens) {
  static const std::optional<InjectedLoss> injected = injected_loss_from_environment();
  StepObservation o;
  bool holds_loss = false;  // the last chunk's rank: its sums hold the loss
  for (int k = 0; k < schedule_.chunks; ++k)
    holds_loss |= pipeline::is_last_chunk(schedule_, {state_->coordinates().pp, k});
  if (holds_loss && local_tokens > 0) o.loss = sums.lm / local_tokens;
  const bool inject = injected && injected->rank == state_->world_rank() && injected->iteration == iteration_ + 1;
  const bool every_run = inject && (injected->kind == "nan" || injected->kind == "spike" || injected->kind == "bitflip");
  if (inject && (every_run || !rerun_->rerunning())) {
    if (injected->kind == "grad_bitflip_once") {
      flip_first_element_bit(params_.grads(), 30);  // the update would use it: the fault is in the state
    } else if (o.loss) {
      if (injected->kind == "spike") o.loss = *o.loss * 1000;
      else if (injected->kind.rfind("bitflip", 0) == 0) o.loss = flip_float_bit(static_cast<float>(*o.loss), 29);
      else o.loss = std::numeric_limits<double>::quiet_NaN();
    }
  }
  if (rerun_->options().check_nan && rerun_->options().check_grads)
    o.grad_sum_of_squares = kernels::sum_of_squares(params_.grads());
  const RerunDecision d = rerun_->after_run(o);
  if (!d.message.empty()) say(d.message);
  if (d.action == RerunDecision::Action::Rerun) return false;
  if (d.action == RerunDecision::Action::Accept) return true;
  // As Megatron's should_checkpoint_and_exit: the last iteration saved, before the update, so that the
  // job can resume from it to re-run this one (not under disabled, where Megatron raises).
  finish_pending_save(/*blocking=*/true);
  if (d.exit_code != 1 && !args_.save.empty() && iteration_ > 0 &&
      ckpt::latest_checkpointed_iteration(args_.save) != iteration_) {
    save();
    finish_pending_save(/*blocking=*/true);
  }
  throw RerunExit(d.exit_code, d.message);
}

void Trainer::log_stragglers(double interval_seconds, int64_t iterations) {
  const double per_iteration_ms = 1000.0 / static_cast<double>(std::max<int64_t>(iterations, 1));
  RankTimes mine;
  mine.step_ms = interval_seconds * per_iteration_ms;
  mine.compute_ms = (times_.forward + times_.backward) * per_iteration_ms;
  mine.communication_ms = (times_.p2p_wait + reduce_seconds_) * per_iteration_ms;
  const std::vector<RankTimes> all = gather_rank_times(world_, mine);
  say(straggler_report(all, args_.straggler_minmax_count, iteration_));
}

}  // namespace tessera::train
