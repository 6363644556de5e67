// The MPI implementation of ProcessGroup (CPU tensors; launched by mpirun, or srun under Slurm), the
// MPI runtime's lifetime, and the hang/failure forensics: a collective timeout that prints the last
// collectives and aborts the job, and abort_all for a rank that cannot go on.
//
// Threads: MPI is initialised with MPI_THREAD_FUNNELED, so only the thread that created the
// MpiRuntime may call into a group (OpenMP threads inside kernels never do).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "comm/collective_log.h"
#include "comm/process_group.h"

namespace tessera::comm {

// Initialises MPI for the lifetime of the object (unless something else already did, in which case
// it neither initialises nor finalises). Create one at the top of main.
class MpiRuntime {
 public:
  MpiRuntime(int* argc = nullptr, char*** argv = nullptr);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  // MPI is initialised and not yet finalised.
  static bool active();
  // This process's rank in MPI_COMM_WORLD (0 when MPI is not active).
  static int world_rank();

 private:
  bool owns_ = false;
};

// The world, as a group named "world" over a duplicate of MPI_COMM_WORLD (so that our traffic never
// matches anyone else's). Collective over all ranks; needs an active MpiRuntime.
std::unique_ptr<ProcessGroup> make_mpi_world_group();

// How long Work::wait() on an MPI group may block before the job is declared hung: the rank then
// prints the collective it waits for and recent_collectives() to stderr and calls
// MPI_Abort(MPI_COMM_WORLD, 1). Zero (the default) waits forever. Applies to waits started later.
void set_collective_timeout(std::chrono::seconds timeout);
std::chrono::seconds collective_timeout();

// For a rank that cannot continue (failed validation, an exception) while others may be blocked in
// a collective with it: prints "rank R: <reason>" to stderr and aborts every rank of the job, so all
// exit non-zero instead of hanging. Without MPI it exits the process with status 1.
[[noreturn]] void abort_all(const std::string& reason);

}  // namespace tessera::comm
