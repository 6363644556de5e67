// Which GemmBackend runs a device's GEMMs: oneDNN for the CPU (gemm_onednn.cc), the registered one for
// a device type (the CUDA backend registers cuBLASLt when it starts).
#include <atomic>

#include "core/check.h"
#include "kernels/gemm.h"

namespace tessera::kernels {

GemmBackend& cpu_gemm_backend();  // gemm_onednn.cc

namespace {
std::atomic<GemmBackend*> g_cuda_backend{nullptr};
}  // namespace

GemmBackend& GemmBackend::for_device(Device device) {
  if (device.type == DeviceType::CPU) return cpu_gemm_backend();
  GemmBackend* b = g_cuda_backend.load(std::memory_order_acquire);
  TESSERA_CHECK(b != nullptr, "GEMM on ", device.str(),
                " is not available: no backend is registered for it (a build without CUDA, or the CUDA "
                "backend was not started)");
  return *b;
}

GemmBackend* GemmBackend::register_backend(DeviceType type, GemmBackend* backend) {
  TESSERA_CHECK(type == DeviceType::CUDA, "GEMM backends are registered for CUDA devices only");
  return g_cuda_backend.exchange(backend, std::memory_order_acq_rel);
}

}  // namespace tessera::kernels
