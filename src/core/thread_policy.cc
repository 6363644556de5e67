#include "core/thread_policy.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

namespace tessera {
namespace {

// The first positive integer in an environment variable (OMP_NUM_THREADS may be a list, "4,2"), or 0.
int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::max(0, std::atoi(v)) : 0;
}

int allowed_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
}

// Ranks on this node, from the launcher's environment (Open MPI, MPICH/Hydra, Slurm); 1 without one.
int local_ranks() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"})
    if (int n = env_int(var); n > 0) return n;
  return 1;
}

// The time of one spin of libgomp's wait loop (one pause instruction), measured.
double spin_nanoseconds() {
#if defined(__x86_64__) || defined(__i386__)
  constexpr int kSpins = 20000;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kSpins; ++i) __builtin_ia32_pause();
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  return std::max(1.0, ns / kSpins);
#else
  return 10.0;  // about a yield instruction's cost
#endif
}

}  // namespace

std::optional<WaitPolicyChoice> choose_wait_policy(int threads, int local_ranks, int cpus, double spin_ns) {
  if (threads <= 1) return std::nullopt;
  if (static_cast<long>(threads) * std::max(1, local_ranks) > cpus) return WaitPolicyChoice{"OMP_WAIT_POLICY", "PASSIVE"};
  const long long spins = static_cast<long long>(kSpinSeconds * 1e9 / std::max(1.0, spin_ns));
  return WaitPolicyChoice{"GOMP_SPINCOUNT", std::to_string(std::max(300000LL, spins))};
}

void settle_openmp_wait_policy(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;  // the user chose
  if (const char* p = std::getenv("TESSERA_OMP_WAIT_POLICY"); p && std::string(p) == "default") return;
  const int cpus = allowed_cpus();
  const int threads = env_int("OMP_NUM_THREADS") > 0 ? env_int("OMP_NUM_THREADS") : cpus;
  const auto choice = choose_wait_policy(threads, local_ranks(), cpus, spin_nanoseconds());
  if (!choice) return;
  setenv(choice->variable.c_str(), choice->value.c_str(), 1);
  execv("/proc/self/exe", argv);  // returns only on failure: then run on with the runtime's defaults
  unsetenv(choice->variable.c_str());
}

}  // namespace tessera
