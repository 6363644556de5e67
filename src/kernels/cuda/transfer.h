// Copies of tensor bytes to, from and within a CUDA device's memory (kernels/cuda/transfer.cc): what
// kernels/tensor_ops.h does for tensors on a GPU, so that the layers above move data only through it.
// On the current device's kernel stream (kernels/cuda/cuda_runtime.h), after the kernels before it; a
// copy to or from the host returns once it is done, one within the device once it is queued. Declared
// in every build, defined only in a CUDA one.
#pragma once

#include <cstddef>

namespace tessera::kernels::cuda {

void copy_to_device(void* device_dst, const void* host_src, size_t bytes, const char* kernel);
void copy_to_host(void* host_dst, const void* device_src, size_t bytes, const char* kernel);
// The ranges must not overlap unless they are the same (then nothing is copied).
void copy_on_device(void* dst, const void* src, size_t bytes, const char* kernel);

}  // namespace tessera::kernels::cuda
