// The device communication of a `tessera train --device cuda` run on several ranks (issue 56): every
// group of ParallelState (tensor, data, pipeline, context, ...) is rebuilt over NCCL where each member
// has a GPU of its own, else staged through pinned host memory over MPI (several ranks on one GPU, or no
// NCCL), or as --device-collectives forces (comm/device_collectives.h). The world group stays MPI: the
// trainer sends it host tensors only.
#pragma once

#include <string>
#include <vector>

#include "comm/parallel_state.h"
#include "core/tensor.h"

namespace tessera::train {

// Collective over the world, after prepare_device(device): wraps `state`'s groups for tensors on
// `device`, as `setting` (auto, staged or nccl) says. Returns this rank's choice per group, for the
// start-up log ("group tensor: staged (ranks 0 and 1 of the group share a GPU, which NCCL refuses)").
std::vector<std::string> use_device_collectives(comm::ParallelState& state, Device device, const std::string& setting);

}  // namespace tessera::train
