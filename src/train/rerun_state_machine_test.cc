// The rerun state machine's decisions in one process (the agreement over ranks is the CLI test's,
// tests/resilience_cli.sh, under mpirun).
#include "train/rerun_state_machine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <tuple>

namespace tessera::train {
namespace {

using Action = RerunDecision::Action;
const double kNaN = std::numeric_limits<double>::quiet_NaN();

StepObservation result(double loss, double grads = 1.0) { return {loss, grads}; }

RerunOptions options(RerunMode mode) {
  RerunOptions o;
  o.mode = mode;
  return o;
}

TEST(RerunStateMachine, AcceptsAFiniteStepWithoutARerun) {
  RerunStateMachine m(options(RerunMode::ValidateResults), nullptr, 0);
  m.begin_iteration(1);
  const RerunDecision d = m.after_run(result(2.5));
  EXPECT_EQ(d.action, Action::Accept);
  EXPECT_TRUE(d.message.empty());
}

TEST(RerunStateMachine, AReproducedNanStopsWithCode16NamingIterationRankAndCheck) {
  RerunStateMachine m(options(RerunMode::ValidateResults), nullptr, 0);
  m.begin_iteration(7);
  RerunDecision d = m.after_run(result(kNaN));
  ASSERT_EQ(d.action, Action::Rerun);
  EXPECT_TRUE(m.rerunning());
  EXPECT_NE(d.message.find("iteration 7, rank 0: found NaN in local forward loss calculation"), std::string::npos)
      << d.message;
  d = m.after_run(result(kNaN));  // NaN again: deterministic
  EXPECT_EQ(d.action, Action::Stop);
  EXPECT_EQ(d.exit_code, 16);
  EXPECT_NE(d.message.find("iteration 7, rank 0: found NaN in local forward loss calculation"), std::string::npos);
  EXPECT_NE(d.message.find("persistent"), std::string::npos) << d.message;
}

TEST(RerunStateMachine, ANanThatTheRerunDoesNotReproduceIsTransient) {
  RerunStateMachine validate(options(RerunMode::ValidateResults), nullptr, 0);
  validate.begin_iteration(3);
  ASSERT_EQ(validate.after_run(result(kNaN)).action, Action::Rerun);
  RerunDecision d = validate.after_run(result(2.5));
  EXPECT_EQ(d.action, Action::Stop);
  EXPECT_EQ(d.exit_code, 17);
  EXPECT_NE(d.message.find("transient"), std::string::npos) << d.message;
  // report_stats goes on with the re-run's result.
  RerunStateMachine report(options(RerunMode::ReportStats), nullptr, 0);
  report.begin_iteration(3);
  ASSERT_EQ(report.after_run(result(kNaN)).action, Action::Rerun);
  d = report.after_run(result(2.5));
  EXPECT_EQ(d.action, Action::Accept);
  EXPECT_NE(d.message.find("going on with the re-run's result"), std::string::npos) << d.message;
}

TEST(RerunStateMachine, ChecksInfLossAndNanGradientsButNotInfGradients) {
  RerunStateMachine m(options(RerunMode::ValidateResults), nullptr, 0);
  m.begin_iteration(2);
  EXPECT_NE(m.after_run(result(std::numeric_limits<double>::infinity())).message.find("found Inf"),
            std::string::npos);
  m.begin_iteration(2);
  EXPECT_NE(m.after_run(result(1.0, kNaN)).message.find("found NaN in local grad norm"), std::string::npos);
  m.begin_iteration(3);  // an overflow's Inf gradients are the loss scaler's, as in Megatron (isnan only)
  EXPECT_EQ(m.after_run(result(1.0, std::numeric_limits<double>::infinity())).action, Action::Accept);
  RerunOptions scaled = options(RerunMode::ValidateResults);
  scaled.check_grads = false;
  RerunStateMachine s(scaled, nullptr, 0);
  s.begin_iteration(1);
  EXPECT_EQ(s.after_run(result(1.0, kNaN)).action, Action::Accept);
}

TEST(RerunStateMachine, NoChecksWithoutCheckForNan) {
  RerunOptions o = options(RerunMode::ValidateResults);
  o.check_nan = false;
  RerunStateMachine m(o, nullptr, 0);
  m.begin_iteration(1);
  EXPECT_EQ(m.after_run(result(kNaN, kNaN)).action, Action::Accept);
}

TEST(RerunStateMachine, DisabledStopsAtTheFirstFailureWithoutARerun) {
  RerunStateMachine m(options(RerunMode::Disabled), nullptr, 0);
  m.begin_iteration(4);
  const RerunDecision d = m.after_run(result(kNaN));
  EXPECT_EQ(d.action, Action::Stop);
  EXPECT_EQ(d.exit_code, 1);
  EXPECT_NE(d.message.find("iteration 4, rank 0"), std::string::npos);
}

TEST(RerunStateMachine, ReportStatsRerunsEveryStepAndSaysNothingWhenItMatches) {
  RerunStateMachine m(options(RerunMode::ReportStats), nullptr, 0);
  m.begin_iteration(1);
  RerunDecision d = m.after_run(result(2.0));
  EXPECT_EQ(d.action, Action::Rerun);
  EXPECT_TRUE(d.message.empty());
  d = m.after_run(result(2.0));
  EXPECT_EQ(d.action, Action::Accept);
  EXPECT_TRUE(d.message.empty());
  m.begin_iteration(2);
  ASSERT_EQ(m.after_run(result(2.0)).action, Action::Rerun);
  d = m.after_run(result(2.0000001));  // non-determinism, reported
  EXPECT_EQ(d.action, Action::Accept);
  EXPECT_NE(d.message.find("iteration 2: rank 0: the re-run's result differs"), std::string::npos) << d.message;
}

TEST(RerunStateMachine, SpikyLossIsTenTimesTheLargestSampledLoss) {
  SpikyLossDetector detector(10, 3);
  for (double loss : {4.0, 5.0}) {
    EXPECT_FALSE(detector.is_spike(loss * 100));  // still sampling
    detector.record(loss);
  }
  detector.record(3.0);
  EXPECT_EQ(detector.max_sampled(), 5.0);
  detector.record(1000);  // sampling is over: the maximum stays
  EXPECT_FALSE(detector.is_spike(49.9));
  EXPECT_TRUE(detector.is_spike(50));
  EXPECT_TRUE(detector.is_spike(-50));
  EXPECT_FALSE(detector.is_spike(kNaN));

  RerunOptions o = options(RerunMode::ValidateResults);
  o.check_spiky_loss = true;
  o.spiky_loss_samples = 2;
  RerunStateMachine m(o, nullptr, 0);
  for (int64_t it = 1; it <= 2; ++it) {
    m.begin_iteration(it);
    EXPECT_EQ(m.after_run(result(3.0)).action, Action::Accept);
  }
  m.begin_iteration(3);
  RerunDecision d = m.after_run(result(300.0));
  ASSERT_EQ(d.action, Action::Rerun);
  EXPECT_NE(d.message.find("iteration 3, rank 0: Spiky loss"), std::string::npos) << d.message;
  EXPECT_EQ(m.after_run(result(300.0)).exit_code, 16);
  // A spike the re-run does not see again (a bit flipped once) is transient.
  m.begin_iteration(4);
  ASSERT_EQ(m.after_run(result(300.0)).action, Action::Rerun);
  EXPECT_EQ(m.after_run(result(3.0)).exit_code, 17);
  // Off by default, as Megatron's: the spike passes.
  RerunOptions off = options(RerunMode::ValidateResults);
  off.spiky_loss_samples = 2;
  RerunStateMachine unchecked(off, nullptr, 0);
  for (int64_t it = 1; it <= 3; ++it) {
    unchecked.begin_iteration(it);
    EXPECT_EQ(unchecked.after_run(result(it == 3 ? 300.0 : 3.0)).action, Action::Accept);
  }
}

TEST(RerunStateMachine, InjectedErrorsDecideWhatTheRerunFinds) {
  for (const auto& [type, action, code] :
       {std::tuple{InjectedError::TransientError, Action::Stop, 17},
        std::tuple{InjectedError::PersistentError, Action::Stop, 16},
        std::tuple{InjectedError::CorrectResult, Action::Stop, 16}}) {
    RerunOptions o = options(RerunMode::ValidateResults);
    o.error_injection_rate = 1;  // every check of every rank
    o.error_injection_type = type;
    RerunStateMachine m(o, nullptr, 0);
    m.begin_iteration(5);
    RerunDecision d = m.after_run(result(2.0));
    ASSERT_EQ(d.action, Action::Rerun);
    EXPECT_NE(d.message.find("injected"), std::string::npos) << d.message;
    d = m.after_run(result(2.0));
    EXPECT_EQ(d.action, action);
    EXPECT_EQ(d.exit_code, code) << d.message;
  }
  // At a rate of N, rank r fails when the shared draw is -r mod N: about one check in N.
  RerunOptions o = options(RerunMode::ValidateResults);
  o.error_injection_rate = 4;
  RerunStateMachine m(o, nullptr, 1);
  int injected = 0;
  for (int64_t it = 1; it <= 400; ++it) {
    m.begin_iteration(it);
    if (m.after_run(result(2.0)).action == Action::Rerun) {
      ++injected;
      m.after_run(result(2.0));
    }
  }
  EXPECT_GT(injected, 60);
  EXPECT_LT(injected, 140);
}

TEST(RerunStateMachine, TrackerFileHasMegatronsLines) {
  const auto file = std::filesystem::temp_directory_path() / "tessera_rerun_tracker_test.txt";
  std::filesystem::remove(file);
  RerunOptions o = options(RerunMode::ValidateResults);
  o.tracker_file = file.string();
  RerunStateMachine m(o, nullptr, 0);
  m.begin_iteration(9);
  m.after_run(result(kNaN));
  m.after_run(result(kNaN));
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("rank=0 iteration=9 status=initial_run result=loss=nan"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("status=first_rerun_reproducible"), std::string::npos) << text.str();
  std::filesystem::remove(file);
}

TEST(RerunStateMachine, FlagValuesAreChecked) {
  EXPECT_EQ(parse_rerun_mode("report_stats"), RerunMode::ReportStats);
  EXPECT_EQ(parse_injected_error("persistent_error"), InjectedError::PersistentError);
  EXPECT_THROW(parse_rerun_mode("validate"), Error);
  EXPECT_THROW(parse_injected_error("transient"), Error);
}

}  // namespace
}  // namespace tessera::train
