// Host <-> device and device <-> device copies over the CUDA runtime (kernels/cuda/transfer.h): plain
// C++, compiled by the host compiler (no kernels), errors as tessera::Error naming the entry point.
#include "kernels/cuda/transfer.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "core/check.h"
#include "kernels/cuda/cuda_runtime.h"

namespace tessera::kernels::cuda {
namespace {

cudaStream_t stream() { return static_cast<cudaStream_t>(tessera::cuda::current_kernel_stream()); }

// On the kernel stream, after the kernels before it, and waited for: the host memory is the caller's
// to read or free on return.
void copy_and_wait(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, const char* kernel) {
  tessera::cuda::check(cudaMemcpyAsync(dst, src, bytes, kind, stream()), kernel);
  tessera::cuda::check(cudaStreamSynchronize(stream()), kernel);
}

}  // namespace

void copy_to_device(void* device_dst, const void* host_src, size_t bytes, const char* kernel) {
  if (bytes) copy_and_wait(device_dst, host_src, bytes, cudaMemcpyHostToDevice, kernel);
}

void copy_to_host(void* host_dst, const void* device_src, size_t bytes, const char* kernel) {
  if (bytes) copy_and_wait(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, kernel);
}

void copy_on_device(void* dst, const void* src, size_t bytes, const char* kernel) {
  if (bytes == 0 || dst == src) return;
  const auto d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
  // cudaMemcpy leaves overlapping ranges undefined (the CPU's memmove does not): refused, not garbled.
  TESSERA_CHECK(d + bytes <= s || s + bytes <= d, kernel, ": overlapping ranges on the device");
  // Queued, not waited for (as cudaMemcpy between device buffers): the kernels after it are ordered by
  // the stream.
  tessera::cuda::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream()), kernel);
}

}  // namespace tessera::kernels::cuda
