#include "train/exit_signal.h"

#include <fcntl.h>

#include <csignal>
#include <cstdlib>

#include "core/check.h"

namespace tessera::train {
namespace {

struct NamedSignal {
  const char* name;
  int number;
};
constexpr NamedSignal kSignals[] = {{"SIGTERM", SIGTERM}, {"SIGINT", SIGINT}, {"SIGUSR1", SIGUSR1},
                                    {"SIGUSR2", SIGUSR2}};

// Below this many seconds between mpirun's SIGTERM and its SIGKILL a save is left to chance: the ranks
// must first finish the iteration under way.
constexpr long kShortestKillDelaySeconds = 10;

const char* name_of(int sig) {
  for (const NamedSignal& n : kSignals)
    if (sig == n.number) return n.name;
  return nullptr;
}

volatile std::sig_atomic_t received_signal = 0;
// Open MPI's mpirun (ORTE) gives every process it starts its address; srun and a singleton do not.
bool under_mpirun = false;

extern "C" void on_exit_signal(int sig) {
  if (received_signal == 0) received_signal = sig;
  // A SIGTERM or SIGINT under mpirun is (but for a kill aimed at the ranks) mpirun's kill sequence, during
  // which its event loop sleeps and relays no output: rank 0, logging, fills its terminal and blocks in a
  // write, never reaching the save before SIGKILL. Non-blocking output from here on (fcntl is
  // async-signal-safe): the write interrupted now restarts (SA_RESTART) and fails instead of waiting, and
  // the lines nobody would read are dropped. The descriptors are this rank's own, opened by mpirun for it.
  if (under_mpirun && (sig == SIGTERM || sig == SIGINT)) {
    for (int fd : {1, 2}) {
      const int flags = fcntl(fd, F_GETFL);
      if (flags != -1) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    }
  }
}

}  // namespace

std::string exit_signal_choices() {
  std::string s;
  for (const NamedSignal& n : kSignals) s += str_cat(s.empty() ? "" : ", ", n.name);
  return s;
}

int exit_signal_number(const std::string& name) {
  for (const NamedSignal& n : kSignals)
    if (name == n.name) return n.number;
  return 0;
}

void install_exit_signal_handler(int exit_signal) {
  under_mpirun = std::getenv("OMPI_MCA_orte_hnp_uri") != nullptr;
  struct sigaction action {};
  action.sa_handler = on_exit_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a signal must not fail a blocking read or wait of the training step
  // SIGTERM and SIGINT always: Slurm, Kubernetes and Ctrl-C send them to the ranks, and their default
  // action would end the run without a save.
  for (int sig : {SIGTERM, SIGINT, exit_signal}) sigaction(sig, &action, nullptr);
}

bool exit_signal_received_anywhere(comm::ProcessGroup& world) {
  Tensor flag = Tensor::zeros({1}, DType::F32, Device::cpu());  // read here
  flag.host_f32()[0] = received_signal != 0 ? 1.0f : 0.0f;
  if (world.size() > 1) world.all_reduce(flag);
  return flag.host_f32()[0] > 0;
}

const char* exit_signal_name() {
  const char* name = name_of(received_signal);
  return name != nullptr ? name : "a signal on another rank";
}

std::string exit_signal_launcher_warning(int exit_signal,
                                         const std::function<const char*(const char*)>& getenv) {
  // Parameters given as `mpirun --mca NAME VALUE` reach the ranks as OMPI_MCA_NAME too.
  if (getenv("OMPI_MCA_orte_hnp_uri") == nullptr) return {};
  if (exit_signal == SIGUSR1 || exit_signal == SIGUSR2) {
    const char* forwarded = getenv("OMPI_MCA_ess_base_forward_signals");
    if (forwarded != nullptr && std::string(forwarded) == "none")
      return str_cat("warning: --exit-signal-handler under mpirun with ess_base_forward_signals=none: mpirun "
                     "does not forward ", name_of(exit_signal), " to the ranks; remove that setting");
    return {};
  }
  const char* value = getenv("OMPI_MCA_odls_base_sigkill_timeout");
  char* end = nullptr;
  const long seconds = value != nullptr ? std::strtol(value, &end, 10) : 1;
  if (value != nullptr && (end == value || *end != '\0')) return {};  // mpirun itself rejects it
  if (seconds >= kShortestKillDelaySeconds) return {};
  return str_cat("warning: --exit-signal-handler under mpirun with odls_base_sigkill_timeout=", seconds,
                 value == nullptr ? " (Open MPI's default)" : "", ": a SIGTERM or SIGINT to mpirun reaches the "
                 "ranks as SIGTERM after ", seconds, " s and SIGKILL ", seconds, " s later, likely too soon to finish "
                 "the iteration and save. "
                 "To stop with a checkpoint, run with --exit-signal SIGUSR1 and send SIGUSR1 to mpirun (it is "
                 "forwarded at once), or give the ranks time with OMPI_MCA_odls_base_sigkill_timeout=60 (or more)");
}

}  // namespace tessera::train
