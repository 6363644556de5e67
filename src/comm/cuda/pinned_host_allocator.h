// Page-locked ("pinned") host memory from the CUDA runtime (cudaHostAlloc), as an Allocator: the host
// buffers a staged process group copies device tensors into (comm/device_staging.h). Copies between a
// GPU and pinned memory are DMA at the bus's speed; from ordinary pageable memory the driver copies
// through a bounce buffer of its own. Compiled only in the CUDA build; the header names no CUDA type.
#pragma once

#include "core/allocator.h"

namespace tessera::comm::cuda {

// One allocator for the process (it keeps nothing: the staging pool reuses what it gets). Allocation
// failures are Errors naming cudaHostAlloc and CUDA's message.
Allocator& pinned_host_allocator();

}  // namespace tessera::comm::cuda
