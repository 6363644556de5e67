// A group whose host tensors go over one ProcessGroup and whose device tensors over another: the NCCL
// group works on its GPU's tensors only, while the trainer's scalars (loss sums, token counts, flags)
// are host tensors over the same groups. An operation whose tensors are all on the host runs on `host`
// (MPI); any other on `device` (NCCL, which refuses a host tensor by name). The staged group needs no
// such wrapper: it passes host tensors to its MPI group itself.
#pragma once

#include <memory>

#include "comm/process_group.h"

namespace tessera::comm {

// `host` and `device` are groups of the same members in the same order (checked); named as `device`.
// split() splits both.
std::unique_ptr<ProcessGroup> make_host_routing_process_group(std::unique_ptr<ProcessGroup> host,
                                                              std::unique_ptr<ProcessGroup> device);

}  // namespace tessera::comm
