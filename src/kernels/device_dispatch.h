// How a kernel that takes tensors chooses its implementation: by the tensors' device.
//
// Every tensor entry point (kernels/<name>.cc) first calls kernel_device(name, tensors, impl), which
// returns the one device its tensors are on, or throws an Error naming the kernel and the device when
// that device has no implementation in this build (rather than reading device memory as host memory).
// The CPU implementations are kernels/cpu/; a kernel with a CUDA one (kernels/cuda/<name>.h, device
// pointers, compiled by nvcc where CMake found the toolkit: TESSERA_WITH_CUDA) passes Impl::kCpuAndCuda
// and then calls it under `if constexpr (kWithCuda)`: a CPU-only build discards that call at compile
// time, so it neither compiles nor links the CUDA code, and refuses such tensors as before.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "core/check.h"
#include "core/tensor.h"

namespace tessera::kernels {

// Whether this build has the CUDA kernels (CMake defines TESSERA_WITH_CUDA where it found the toolkit).
#if defined(TESSERA_WITH_CUDA)
inline constexpr bool kWithCuda = true;
#else
inline constexpr bool kWithCuda = false;
#endif

// The devices a kernel has implementations for: the CPU always, CUDA when it has a kernels/cuda/ one.
enum class Impl { kCpu, kCpuAndCuda };

// The device all defined tensors of `tensors` are on; an Error if they differ or it has no
// implementation of `kernel` (`impl` says which devices have one; CUDA counts only in a CUDA build).
// Undefined tensors are the optional operands a call leaves out (a bias, a gradient not wanted) and
// are skipped.
inline Device kernel_device(const char* kernel, std::initializer_list<const Tensor*> tensors,
                            Impl impl = Impl::kCpu) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors)
    if (t->defined()) {
      first = t;
      break;
    }
  const Device d = first ? first->device() : Device::cpu();
  for (const Tensor* t : tensors)
    TESSERA_CHECK(!t->defined() || t->device() == d, kernel, ": tensors on ", d.str(), " and ", t->device().str());
  const bool available =
      d.type == DeviceType::CPU || (kWithCuda && impl == Impl::kCpuAndCuda && d.type == DeviceType::CUDA);
  TESSERA_CHECK(available, kernel, " on ", d.str(), " is not available in this build");
  return d;
}

// Whether the implementation to run is the CUDA one (always false in a CPU-only build).
inline bool on_cuda(Device d) { return kWithCuda && d.type == DeviceType::CUDA; }

// For the CPU implementations' optional pointers: the tensor's fp32 data, or null when it is undefined.
inline float* f32_or_null(const Tensor& t) { return t.defined() ? t.f32() : nullptr; }
inline const int32_t* i32_or_null(const Tensor& t) { return t.defined() ? t.i32() : nullptr; }

// `t` has `n` elements (the rest of the shape is the caller's), else an Error naming the kernel.
inline void check_numel(const char* kernel, const char* what, const Tensor& t, int64_t n) {
  TESSERA_CHECK(t.numel() == n, kernel, ": ", what, " has ", t.numel(), " elements, expected ", n);
}

}  // namespace tessera::kernels
