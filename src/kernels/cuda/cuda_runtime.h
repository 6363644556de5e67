// The CUDA runtime as Tessera's CUDA backend uses it: the devices this process can use, CUDA's errors
// as tessera::Error, and each device's caching allocator behind the Allocator seam (core/allocator.h).
// Compiled only where CMake found the CUDA toolkit (TESSERA_CUDA); the header names no CUDA type, so
// the layers above can include it without CUDA's headers.
#pragma once

#include <cstddef>
#include <string>

#include "core/stream_caching_allocator.h"

namespace tessera::cuda {

// The number of CUDA devices this process can use: 0 when there is no GPU or no driver, with CUDA's
// reason in `why` (for a test's skip message or the start-up line).
int device_count(std::string* why = nullptr);

// Throws a tessera::Error naming `what` and CUDA's message when `status` (a cudaError_t) is not success.
void check(int status, const char* what);

// The stream every kernel, library call (cuBLASLt, cuDNN) and copy of the CUDA backend runs on for
// cuda:`ordinal` (a cudaStream_t, opaque here): one per device, made on first use with
// cudaStreamNonBlocking and kept for the life of the process. Non-blocking, so nothing is ordered with the
// legacy default stream by itself: work there (another library's) must be ordered by an event or a
// synchronisation. Being one stream, it keeps the step's work in the order it was queued, as the legacy
// stream did, and it can be captured into a CUDA graph, which the legacy stream cannot.
void* kernel_stream(int ordinal);
// kernel_stream of the calling thread's current device (cudaGetDevice), the one a launch goes to; null
// (the legacy stream) where no device is usable, so that the launch fails with CUDA's error, named.
void* current_kernel_stream();
// Blocks until everything queued on cuda:`ordinal`'s kernel stream is done (copies to pageable host
// memory read after it, a scalar read back).
void synchronize_kernel_stream(int ordinal);

// The device's memory in bytes: what is free now and the total.
struct MemoryInfo {
  size_t free_bytes, total_bytes;
};
MemoryInfo memory_info(int ordinal);

// Registers a StreamCachingAllocator for every device present, or only for cuda:`only` when it is not
// negative (a rank of several on a node: touching the other GPUs would open a CUDA context on each);
// idempotent. Each is capped at `cap_bytes`, or where that is 0 at TESSERA_CUDA_MEMORY_CAP_MIB MiB if set,
// else at the device's free memory at the time. Returns the number of devices.
int register_device_allocators(size_t cap_bytes = 0, int only = -1);

// The allocator register_device_allocators made for `ordinal` (its counts feed the memory report).
StreamCachingAllocator& device_allocator(int ordinal);

}  // namespace tessera::cuda
