// How a kernel that takes tensors chooses its implementation: by the tensors' device. Only the CPU has
// implementations in this build (kernels/cpu/); a tensor on another device (one whose backend
// registered an allocator, core/allocator.h) is refused with an Error naming the kernel and the device,
// rather than read as host memory.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "core/check.h"
#include "core/tensor.h"

namespace tessera::kernels {

// The device all defined tensors of `tensors` are on; an Error if they differ or it has no
// implementation of `kernel`. Undefined tensors are the optional operands a call leaves out (a bias,
// a gradient not wanted) and are skipped.
inline Device kernel_device(const char* kernel, std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors)
    if (t->defined()) {
      first = t;
      break;
    }
  const Device d = first ? first->device() : Device::cpu();
  for (const Tensor* t : tensors)
    TESSERA_CHECK(!t->defined() || t->device() == d, kernel, ": tensors on ", d.str(), " and ", t->device().str());
  TESSERA_CHECK(d.type == DeviceType::CPU, kernel, " on ", d.str(), " is not available in this build");
  return d;
}

// For the CPU implementations' optional pointers: the tensor's fp32 data, or null when it is undefined.
inline float* f32_or_null(const Tensor& t) { return t.defined() ? t.f32() : nullptr; }
inline const int32_t* i32_or_null(const Tensor& t) { return t.defined() ? t.i32() : nullptr; }

// `t` has `n` elements (the rest of the shape is the caller's), else an Error naming the kernel.
inline void check_numel(const char* kernel, const char* what, const Tensor& t, int64_t n) {
  TESSERA_CHECK(t.numel() == n, kernel, ": ", what, " has ", t.numel(), " elements, expected ", n);
}

}  // namespace tessera::kernels
