// Which GPU a rank of `tessera train --device cuda` uses (issue 56): one per rank by its rank on the node
// (the launcher's OMPI_COMM_WORLD_LOCAL_RANK or SLURM_LOCALID), modulo the GPUs this process sees
// (CUDA_VISIBLE_DEVICES already renumbered them: ordinals count the visible ones); --device cuda:N names
// one and wins. Where several ranks of a node land on one GPU (more ranks than GPUs: the one-GPU device
// check runs two), each holds at most an equal share of its memory. Pure functions: the environment is
// read by the caller (train/device_setup.cc), so every case is tested without a GPU.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>

namespace tessera::train {

// This process's rank among the ranks of its node, as the launcher said.
struct LocalRank {
  int rank = -1;       // -1: no launcher said it (a single process, or a launcher that sets neither)
  int size = 0;        // ranks on this node; 0 where not said
  std::string source;  // the variable it came from, for the start-up line
};

// From Open MPI's OMPI_COMM_WORLD_LOCAL_RANK / OMPI_COMM_WORLD_LOCAL_SIZE, else Slurm's SLURM_LOCALID /
// SLURM_TASKS_PER_NODE (its first count: "2(x3)" and "4,2" give 2 and 4). `getenv` is std::getenv or a
// test's table. A value that is not a number is an Error naming the variable.
LocalRank local_rank_from(const std::function<const char*(const char*)>& getenv);

struct GpuChoice {
  int ordinal = 0;        // among the visible GPUs
  int ranks_sharing = 1;  // ranks of this node on that GPU, this one included
  std::string reason;     // for the start-up line: "local rank 1 of 2 (OMPI_COMM_WORLD_LOCAL_RANK), 1 GPU: ..."
};

// `named`: the N of --device cuda:N (it wins), or none for --device cuda / left out. `visible`: the GPUs
// this process sees (at least 1).
GpuChoice choose_gpu(std::optional<int> named, int visible, const LocalRank& local);

// The cap (bytes) of one process's device allocator: 0 (no cap beyond the free memory) for a GPU of its
// own; with `ranks_sharing` > 1 an equal share of 90% of `total_bytes` (the rest for CUDA's contexts and
// cuBLASLt's workspaces). TESSERA_CUDA_MEMORY_CAP_MIB, where set, is the allocator's own and wins.
size_t shared_gpu_memory_cap(size_t total_bytes, int ranks_sharing);

}  // namespace tessera::train
