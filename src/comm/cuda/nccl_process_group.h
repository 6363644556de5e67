// The ProcessGroup over NCCL, for tensors on a GPU where each rank has a GPU of its own (NCCL refuses
// two ranks of one communicator on one GPU), and the group a layout uses for device tensors: NCCL or
// staged through the host over MPI, as comm/device_collectives.h chooses. Compiled only in the CUDA
// build; the header names no CUDA or NCCL type.
//
// NCCL is loaded at run time (comm/nccl_library.h). Each group has a communicator, built over an MPI
// group of the same members (rank 0's unique id broadcast over it; split() splits the MPI group and
// builds a communicator over the part), and a communication stream: an operation waits (an event) for
// the kernels queued before it on the device's default stream, runs on the communication stream, and
// its handle's wait() blocks the host until it is done, so that the kernels of a backward pass queued
// meanwhile overlap it. Tags of send/recv are checked but unused: NCCL matches a pair's messages in the
// order they were posted.
//
// Failures end every rank with the message (comm::abort_all): an NCCL call that fails, an error NCCL
// reports while the operation runs (polled while wait() waits), and, with a collective timeout set
// (comm/mpi_process_group.h), an operation not done in time, the watchdog, which aborts the
// communicator and prints the recent collectives first.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "comm/device_collectives.h"
#include "comm/nccl_library.h"
#include "comm/process_group.h"

namespace tessera::comm::cuda {

// Collective over `bootstrap` (host-memory group of the members; kept for split()): a communicator of
// its members on CUDA device `ordinal`, named as `bootstrap`.
std::unique_ptr<ProcessGroup> make_nccl_process_group(std::unique_ptr<ProcessGroup> bootstrap, int ordinal,
                                                      const NcclLibrary& nccl);

// One number per physical GPU, the same in every process that uses it: the host name and the GPU's PCI
// bus id, hashed (CUDA_VISIBLE_DEVICES renumbers ordinals, not buses). For first_shared_device.
int64_t device_key(int ordinal);

// Collective over `mpi`: the group for tensors on cuda:`ordinal`, NCCL (its host tensors over a copy of
// `mpi`: comm/host_routing_process_group.h) or staged over `mpi` as
// choose_collectives says for `setting` (every member decides alike: NCCL only where it loaded on all of
// them). `reason` (optional) receives the choice's reason for the start-up line.
std::unique_ptr<ProcessGroup> make_device_process_group(std::unique_ptr<ProcessGroup> mpi, DeviceCollectives setting,
                                                        int ordinal, std::string* reason = nullptr);

}  // namespace tessera::comm::cuda
