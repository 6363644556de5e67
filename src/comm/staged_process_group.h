// A ProcessGroup for device tensors over a host-memory group (MPI): each tensor on a device is copied
// into a host buffer, the wrapped group runs the collective or the send/receive on the host copies, and
// what the operation writes is copied back (for the asynchronous forms, in the handle's wait() or the
// test() that finds it complete). Host tensors pass straight through. This is how ranks that share a GPU
// (which NCCL refuses) or have no NCCL communicate: Debian's Open MPI is not CUDA-aware, so device
// memory must go through the host (docs/devices.md, "Several GPUs").
//
// The host buffers come from a pool shared by the group and the groups split from it: reused while the
// sizes recur (gradient buckets, activations), grown when a larger one is needed, each held by one
// operation from its start to its completion. Only the thread that uses the group touches the pool
// (MPI_THREAD_FUNNELED, as the MPI group).
#pragma once

#include <cstdint>
#include <memory>

#include "comm/device_staging.h"
#include "comm/process_group.h"

namespace tessera::comm {

// What the pool has done, for tests and the memory report.
struct StagingStats {
  int64_t buffers_allocated = 0;  // host buffers ever allocated (a reused one counts once)
  int64_t bytes_held = 0;         // bytes of the host buffers held now, idle or in use
  int64_t copies_to_host = 0;     // device -> host copies made
  int64_t copies_to_device = 0;   // host -> device copies made
};

// Wraps `inner` (its rank, size, name and ranks are the new group's); `staging` makes the copies and
// the host buffers. split() wraps the inner group's split, sharing the pool.
std::unique_ptr<ProcessGroup> make_staged_process_group(std::unique_ptr<ProcessGroup> inner,
                                                        std::shared_ptr<DeviceStaging> staging);

// The pool's counts of a group made by make_staged_process_group (and of every group split from it);
// an Error for any other group.
StagingStats staging_stats(const ProcessGroup& staged_group);

}  // namespace tessera::comm
