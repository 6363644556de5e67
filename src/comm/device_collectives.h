// How a group's collectives reach tensors on a GPU: NCCL where every member has a GPU of its own and
// NCCL loads, else staged through pinned host memory over MPI (comm/staged_process_group.h), which also
// serves several ranks sharing one GPU (NCCL refuses two ranks of one communicator on one GPU:
// "Duplicate GPU detected"). Host tensors always go over MPI. Chosen per group; the flag
// --device-collectives (Tessera's own, Megatron has none) forces one path.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "comm/process_group.h"

namespace tessera::comm {

enum class DeviceCollectives { Auto, Staged, Nccl };

// "auto", "staged" or "nccl"; anything else is an Error naming the flag and the choices.
DeviceCollectives parse_device_collectives(const std::string& value);
const char* device_collectives_name(DeviceCollectives setting);

// What the choice depends on, for one group.
struct CollectivesFacts {
  bool device_tensors = false;  // the group's tensors live on a GPU
  bool nccl_loaded = false;     // libnccl.so.2 was found and loaded (comm/nccl_library.h)
  std::string nccl_why;         // why not, when not
  // Two members of the group that use the same GPU (group ranks), if any (first_shared_device).
  std::optional<std::pair<int, int>> shared_device;
};

enum class CollectivesPath { Mpi, Staged, Nccl };
const char* collectives_path_name(CollectivesPath path);  // "mpi", "staged", "nccl"

struct CollectivesChoice {
  CollectivesPath path;
  std::string reason;  // for the start-up line: "group tensor: nccl (each rank has its own GPU)"
};

// The path for group `group` (its name, for messages). --device-collectives nccl where NCCL cannot run
// the group (not loaded, or two members on one GPU) is an Error saying why and what to use instead.
CollectivesChoice choose_collectives(DeviceCollectives setting, const CollectivesFacts& facts, const std::string& group);

// Collective over g: the first two group ranks whose `device_key` (one number per GPU, the same for
// every process that uses it: host and PCI bus id, comm/cuda/nccl_process_group.h) is equal, or none.
std::optional<std::pair<int, int>> first_shared_device(ProcessGroup& g, int64_t device_key);

}  // namespace tessera::comm
