// How a kernel that takes tensors chooses its implementation: by the tensors' device. Only the CPU has
// implementations in this build; a tensor on another device (one whose backend registered an
// allocator, core/allocator.h) is refused with an Error naming the kernel and the device, rather than
// read as host memory.
#pragma once

#include <initializer_list>

#include "core/check.h"
#include "core/tensor.h"

namespace tessera::kernels {

// The device all of `tensors` are on; an Error if they differ or it has no implementation of `kernel`.
inline Device kernel_device(const char* kernel, std::initializer_list<const Tensor*> tensors) {
  const Device d = (*tensors.begin())->device();
  for (const Tensor* t : tensors)
    TESSERA_CHECK(t->device() == d, kernel, ": tensors on ", d.str(), " and ", t->device().str());
  TESSERA_CHECK(d.type == DeviceType::CPU, kernel, " on ", d.str(), " is not available in this build");
  return d;
}

}  // namespace tessera::kernels
