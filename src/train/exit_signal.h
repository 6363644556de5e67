// --exit-signal-handler: SIGTERM or SIGINT (a scheduler's preemption, Ctrl-C) only sets a flag; the
// training loop asks every rank at the end of each iteration whether any was signalled, and if so all
// of them save a checkpoint and leave the loop together, so the job exits 0 with nothing lost.
#pragma once

#include "comm/process_group.h"

namespace tessera::train {

// Replaces the default SIGTERM and SIGINT actions of this process by the flag.
void install_exit_signal_handler();

// Whether any rank of `world` has received one of the signals. Collective over world.
bool exit_signal_received_anywhere(comm::ProcessGroup& world);

// "SIGTERM" or "SIGINT": the first signal this process received (or "a signal on another rank").
const char* exit_signal_name();

}  // namespace tessera::train
