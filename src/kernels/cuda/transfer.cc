// Host <-> device and device <-> device copies over the CUDA runtime (kernels/cuda/transfer.h): plain
// C++, compiled by the host compiler (no kernels), errors as tessera::Error naming the entry point.
#include "kernels/cuda/transfer.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "core/check.h"
#include "kernels/cuda/cuda_runtime.h"

namespace tessera::kernels::cuda {

void copy_to_device(void* device_dst, const void* host_src, size_t bytes, const char* kernel) {
  if (bytes) tessera::cuda::check(cudaMemcpy(device_dst, host_src, bytes, cudaMemcpyHostToDevice), kernel);
}

void copy_to_host(void* host_dst, const void* device_src, size_t bytes, const char* kernel) {
  if (bytes) tessera::cuda::check(cudaMemcpy(host_dst, device_src, bytes, cudaMemcpyDeviceToHost), kernel);
}

void copy_on_device(void* dst, const void* src, size_t bytes, const char* kernel) {
  if (bytes == 0 || dst == src) return;
  const auto d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
  // cudaMemcpy leaves overlapping ranges undefined (the CPU's memmove does not): refused, not garbled.
  TESSERA_CHECK(d + bytes <= s || s + bytes <= d, kernel, ": overlapping ranges on the device");
  tessera::cuda::check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice), kernel);
}

}  // namespace tessera::kernels::cuda
