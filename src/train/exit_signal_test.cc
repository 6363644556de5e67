// --exit-signal: the names accepted, the rule in the error, and the start-up warning that names the
// launcher setting under which a stop of mpirun cannot leave the ranks time to save.
#include "train/exit_signal.h"

#include <gtest/gtest.h>

#include <csignal>
#include <map>

#include "train/args/arguments.h"
#include "train/trainer_testing.h"

namespace tessera::train {
namespace {

const std::string kBase = testing::kSmallRunFlags;

std::string error_of(const std::string& extra) {
  try {
    parse_train_arguments(testing::split_flags(kBase + extra), 1);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ExitSignal, NamesAreMegatronCores) {
  EXPECT_EQ(exit_signal_choices(), "SIGTERM, SIGINT, SIGUSR1, SIGUSR2");
  EXPECT_EQ(exit_signal_number("SIGUSR1"), SIGUSR1);
  EXPECT_EQ(exit_signal_number("SIGTERM"), SIGTERM);
  EXPECT_EQ(exit_signal_number("USR1"), 0);
  EXPECT_EQ(exit_signal_number("SIGKILL"), 0);
}

TEST(ExitSignal, FlagIsValidatedWithTheRule) {
  EXPECT_EQ(error_of("--exit-signal-handler --exit-signal SIGUSR2"), "");
  EXPECT_EQ(error_of("--exit-signal-handler --exit-signal SIGHUP"),
            "--exit-signal=SIGHUP: must be one of SIGTERM, SIGINT, SIGUSR1, SIGUSR2");
  EXPECT_EQ(error_of("--exit-signal SIGUSR1"), "--exit-signal=SIGUSR1: needs --exit-signal-handler");
}

std::string warning(int sig, std::map<std::string, std::string> env) {
  return exit_signal_launcher_warning(sig, [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(ExitSignal, WarnsUnderMpirunWhenTheRanksHaveNoTimeToSave) {
  const std::string uri = "1.0;tcp://127.0.0.1:1";
  // Not under mpirun (a single process, srun): nothing to say.
  EXPECT_EQ(warning(SIGTERM, {}), "");
  // mpirun's default: SIGTERM 1 s after the stop, SIGKILL 1 s later.
  const std::string w = warning(SIGTERM, {{"OMPI_MCA_orte_hnp_uri", uri}});
  EXPECT_NE(w.find("odls_base_sigkill_timeout=1 (Open MPI's default)"), std::string::npos) << w;
  EXPECT_NE(w.find("--exit-signal SIGUSR1"), std::string::npos) << w;
  EXPECT_NE(warning(SIGINT, {{"OMPI_MCA_orte_hnp_uri", uri}, {"OMPI_MCA_odls_base_sigkill_timeout", "5"}})
                .find("odls_base_sigkill_timeout=5:"),
            std::string::npos);
  // Time enough, or a signal that mpirun forwards at once.
  EXPECT_EQ(warning(SIGTERM, {{"OMPI_MCA_orte_hnp_uri", uri}, {"OMPI_MCA_odls_base_sigkill_timeout", "60"}}), "");
  EXPECT_EQ(warning(SIGUSR1, {{"OMPI_MCA_orte_hnp_uri", uri}}), "");
  // ... unless forwarding is turned off.
  EXPECT_NE(warning(SIGUSR2, {{"OMPI_MCA_orte_hnp_uri", uri}, {"OMPI_MCA_ess_base_forward_signals", "none"}})
                .find("ess_base_forward_signals=none"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera::train
