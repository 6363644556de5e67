// --exit-signal-handler: SIGTERM, SIGINT (a scheduler's preemption, Ctrl-C) or the --exit-signal only sets
// a flag; the training loop asks every rank at the end of each iteration whether any was signalled, and if
// so all of them save a checkpoint and leave the loop together, so the job exits 0 with nothing lost.
//
// Under Open MPI 4.1's mpirun a SIGTERM or SIGINT to mpirun itself is not forwarded: mpirun sends the ranks
// SIGCONT at once, SIGTERM odls_base_sigkill_timeout seconds later (1 by default) and SIGKILL as long again
// after that, so by default the ranks have 1 s to save. SIGUSR1 and SIGUSR2 are forwarded to the ranks at
// once, and mpirun then waits for them to exit: `kill -USR1 <mpirun>` with --exit-signal SIGUSR1 always
// saves. (Measured with Open MPI 4.1.4; tests/mpirun_stop_cli.sh.)
#pragma once

#include <functional>
#include <string>

#include "comm/process_group.h"

namespace tessera::train {

// The signals --exit-signal accepts, as Megatron-Core's: "SIGTERM, SIGINT, SIGUSR1, SIGUSR2".
std::string exit_signal_choices();

// The number of a signal named as --exit-signal accepts it ("SIGUSR1"), or 0 for any other name.
int exit_signal_number(const std::string& name);

// Replaces the default actions of SIGTERM, SIGINT and `exit_signal` in this process by the flag.
void install_exit_signal_handler(int exit_signal);

// Whether any rank of `world` has received one of the signals. Collective over world.
bool exit_signal_received_anywhere(comm::ProcessGroup& world);

// "SIGTERM", "SIGUSR1", ...: the first signal this process received (or "a signal on another rank").
const char* exit_signal_name();

// Why, under the launcher that started this process, stopping the job would not leave the ranks time to
// save with --exit-signal `exit_signal`, naming the launcher setting; empty where nothing is known against
// it. `getenv` reads the environment (a parameter in tests).
std::string exit_signal_launcher_warning(int exit_signal,
                                         const std::function<const char*(const char*)>& getenv);

}  // namespace tessera::train
