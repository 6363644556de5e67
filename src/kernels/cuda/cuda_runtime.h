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
