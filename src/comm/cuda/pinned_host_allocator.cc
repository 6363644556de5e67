#include "comm/cuda/pinned_host_allocator.h"

#include <cuda_runtime.h>

#include "core/check.h"

namespace tessera::comm::cuda {

namespace {

class PinnedHostAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes, size_t alignment) override {
    // cudaHostAlloc returns page-aligned memory, more than any alignment a tensor asks for.
    TESSERA_CHECK(alignment <= 4096, "pinned host memory: alignment ", alignment, " is more than a page");
    void* p = nullptr;
    const cudaError_t status = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable);
    TESSERA_CHECK(status == cudaSuccess, "cudaHostAlloc of ", bytes, " bytes of pinned host memory failed: ",
                  cudaGetErrorName(status), ": ", cudaGetErrorString(status));
    return p;
  }
  void deallocate(void* p, size_t) override { cudaFreeHost(p); }
};

}  // namespace

Allocator& pinned_host_allocator() {
  static PinnedHostAllocator* allocator = new PinnedHostAllocator;  // never destroyed: storages may outlive main
  return *allocator;
}

}  // namespace tessera::comm::cuda
