// How OpenMP's worker threads wait between parallel regions, settled before the OpenMP runtime starts.
//
// A worker that finds no work spins for a while, then sleeps; a region that needs a sleeping worker
// waits for it to wake, which costs tens of microseconds on a quiet machine and up to the host's
// scheduling quantum (about 5 ms) on a cloud machine whose host is slow to resume a halted virtual CPU
// (issue 40). libgomp spins 300,000 pause instructions by default: 1 to 35 ms depending on the CPU, so
// on some machines workers fall asleep between the kernels of one step or between the steps of a decode.
// libgomp reads its settings (OMP_WAIT_POLICY, GOMP_SPINCOUNT) once, when it is loaded, before main;
// so settle_openmp_wait_policy sets them and re-executes the program (the same process and arguments,
// before anything else has started) when the user has set neither:
//   - the process owns its cores (OpenMP threads x ranks on this node <= the CPUs it may run on):
//     GOMP_SPINCOUNT worth about kSpinSeconds of spinning, so workers stay awake through a step and
//     between steps; an idle process (a server between requests) still lets them sleep after that;
//   - the cores are shared (more threads than CPUs): OMP_WAIT_POLICY=PASSIVE, so a waiting worker gives
//     its core at once to the other ranks' threads and to MPI's progress.
// Single-threaded processes have no workers and are left alone. TESSERA_OMP_WAIT_POLICY=default keeps
// the runtime's own behaviour; a user's OMP_WAIT_POLICY or GOMP_SPINCOUNT always wins.
#pragma once

#include <optional>
#include <string>

namespace tessera {

inline constexpr double kSpinSeconds = 0.2;

struct WaitPolicyChoice {
  std::string variable, value;  // what to set, e.g. GOMP_SPINCOUNT=1700000
};

// The setting for a process with `threads` OpenMP threads, `local_ranks` processes on its node and
// `cpus` CPUs it may run on, with one spin (a pause instruction) taking `spin_ns`; nothing when no
// setting is due (one thread, or the user chose).
std::optional<WaitPolicyChoice> choose_wait_policy(int threads, int local_ranks, int cpus, double spin_ns);

// Applies choose_wait_policy to this process (from its environment and CPU affinity) and, when it sets
// something, re-executes argv with it. Returns when nothing is to be done or the re-execution failed.
void settle_openmp_wait_policy(char** argv);

}  // namespace tessera
