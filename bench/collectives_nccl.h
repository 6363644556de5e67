// bench_collectives --backend nccl: the collectives through NCCL's process group
// (comm/cuda/nccl_process_group.h) on device buffers, one GPU per rank chosen by the rank's place on its
// node, reported as nccl-tests reports them (time, algbw, busbw: comm/bus_bandwidth.h); with
// --cluster-output FILE the all-reduce's bus bandwidth and latency as a cluster file's "nccl" object
// (tessera plan --cluster FILE). Refused by name where it cannot run: a build without CUDA, no GPU, no
// NCCL, two ranks on one GPU, --cluster-output at one rank.
#pragma once

#include <cstdint>
#include <string>

namespace bench {

struct NcclBenchOptions {
  int reps = 7;
  int64_t min_bytes = 4096, max_bytes = 64 << 20;
  std::string only;            // one collective by name; all when empty
  std::string cluster_output;  // where to write the "nccl" object; none when empty
};

// Runs under an initialised MPI; returns the exit status. Errors (tessera::Error) name the flag.
int run_nccl_collectives(const NcclBenchOptions& o);

}  // namespace bench
