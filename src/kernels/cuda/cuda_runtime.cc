#include "kernels/cuda/cuda_runtime.h"

#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/check.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/transfer.h"

namespace tessera::cuda {
namespace {

// Device memory from cudaMalloc, one device's.
class CudaBlockSource final : public BlockSource {
 public:
  explicit CudaBlockSource(int ordinal) : ordinal_(ordinal) {}

  void* allocate_block(size_t bytes) override {
    check(cudaSetDevice(ordinal_), "cudaSetDevice");
    void* p = nullptr;
    const cudaError_t status = cudaMalloc(&p, bytes);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clears the sticky error so that the caller may retry after a flush
      return nullptr;
    }
    check(status, "cudaMalloc");
    return p;
  }
  void free_block(void* p, size_t) override {
    check(cudaSetDevice(ordinal_), "cudaSetDevice");
    check(cudaFree(p), "cudaFree");
  }
  void synchronize() override {
    check(cudaSetDevice(ordinal_), "cudaSetDevice");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  // On the kernel stream, so in order with the kernels.
  void set_zero(void* p, size_t bytes) override {
    check(cudaSetDevice(ordinal_), "cudaSetDevice");
    if (bytes)
      check(cudaMemsetAsync(p, 0, bytes, static_cast<cudaStream_t>(kernel_stream(ordinal_))),
            "Tensor::zero_ (cudaMemsetAsync)");
  }
  void fill_f32(float* p, float value, size_t count) override {
    check(cudaSetDevice(ordinal_), "cudaSetDevice");
    kernels::cuda::fill(p, value, static_cast<int64_t>(count));
  }
  void copy_bytes(void* dst, const void* src, size_t bytes) override {
    check(cudaSetDevice(ordinal_), "cudaSetDevice");
    kernels::cuda::copy_on_device(dst, src, bytes, "Tensor::copy_from");
  }

 private:
  int ordinal_;
};

struct DeviceBackend {
  std::unique_ptr<CudaBlockSource> source;
  std::unique_ptr<StreamCachingAllocator> allocator;
};

std::mutex g_mutex;

// The kernel streams by ordinal, null until made; read without the lock on every launch.
constexpr int kMaxStreamDevices = 64;
std::mutex g_stream_mutex;
std::atomic<cudaStream_t> g_streams[kMaxStreamDevices];
// Never destroyed: storages may be freed during static destruction, after a vector would be gone.
std::vector<DeviceBackend>& backends() {
  static auto* b = new std::vector<DeviceBackend>();
  return *b;
}

}  // namespace

void check(int status, const char* what) {
  const auto s = static_cast<cudaError_t>(status);
  TESSERA_CHECK(s == cudaSuccess, what, " failed: ", cudaGetErrorName(s), ": ", cudaGetErrorString(s));
}

int device_count(std::string* why) {
  int n = 0;
  const cudaError_t status = cudaGetDeviceCount(&n);
  if (status != cudaSuccess) {
    cudaGetLastError();
    if (why) *why = std::string("no CUDA device: ") + cudaGetErrorName(status) + ": " + cudaGetErrorString(status);
    // CUDA says "insufficient driver" both without a driver and with one too old for this build; the
    // driver version (0 when none is installed) tells which, in words a user can act on.
    int driver = 0, runtime = 0;
    if (why && status == cudaErrorInsufficientDriver && cudaDriverGetVersion(&driver) == cudaSuccess &&
        cudaRuntimeGetVersion(&runtime) == cudaSuccess) {
      const auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
      *why = driver == 0 ? "no CUDA device: no NVIDIA driver on this machine"
                         : "no CUDA device: the NVIDIA driver supports CUDA " + version(driver) +
                               ", older than this build's CUDA " + version(runtime) + " (cudaErrorInsufficientDriver)";
    }
    return 0;
  }
  if (n == 0 && why) *why = "no CUDA device: the driver reports none";
  return n;
}

void* kernel_stream(int ordinal) {
  TESSERA_CHECK(ordinal >= 0 && ordinal < kMaxStreamDevices, "kernel_stream: no cuda:", ordinal, " (at most ",
                kMaxStreamDevices, " devices per process)");
  if (cudaStream_t s = g_streams[ordinal].load(std::memory_order_acquire)) return s;
  std::lock_guard<std::mutex> lock(g_stream_mutex);
  if (cudaStream_t s = g_streams[ordinal].load(std::memory_order_acquire)) return s;
  int current = 0;
  check(cudaGetDevice(&current), "cudaGetDevice");
  check(cudaSetDevice(ordinal), "cudaSetDevice");
  cudaStream_t s = nullptr;
  const cudaError_t status = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaSetDevice(current);  // the caller's device again, whatever happened
  check(status, "cudaStreamCreateWithFlags (the kernel stream)");
  g_streams[ordinal].store(s, std::memory_order_release);  // never destroyed: kernels may run at exit
  return s;
}

void* current_kernel_stream() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    // No usable device (no GPU, no driver): the launch or copy that follows fails with CUDA's error under
    // its own name, as it did on the legacy stream, rather than here under a name the caller never used.
    cudaGetLastError();
    return nullptr;
  }
  return kernel_stream(device);
}

void synchronize_kernel_stream(int ordinal) {
  check(cudaStreamSynchronize(static_cast<cudaStream_t>(kernel_stream(ordinal))),
        "cudaStreamSynchronize (the kernel stream)");
}

MemoryInfo memory_info(int ordinal) {
  check(cudaSetDevice(ordinal), "cudaSetDevice");
  MemoryInfo m{};
  check(cudaMemGetInfo(&m.free_bytes, &m.total_bytes), "cudaMemGetInfo");
  return m;
}

int register_device_allocators(size_t cap_bytes, int only) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto& b = backends();
  if (!b.empty()) return static_cast<int>(b.size());
  const int n = device_count();
  if (cap_bytes == 0) {
    if (const char* mib = std::getenv("TESSERA_CUDA_MEMORY_CAP_MIB")) {
      char* end = nullptr;
      const unsigned long long v = std::strtoull(mib, &end, 10);
      TESSERA_CHECK(end != mib && *end == '\0' && v > 0, "TESSERA_CUDA_MEMORY_CAP_MIB='", mib,
                    "' must be a positive number of MiB");
      cap_bytes = static_cast<size_t>(v) << 20;
    }
  }
  TESSERA_CHECK(only < n, "no cuda:", only, " on this machine (", n, " CUDA devices)");
  b.resize(n);
  for (int i = 0; i < n; ++i) {
    if (only >= 0 && i != only) continue;
    const size_t cap = cap_bytes ? cap_bytes : memory_info(i).free_bytes;
    DeviceBackend d;
    d.source = std::make_unique<CudaBlockSource>(i);
    d.allocator = std::make_unique<StreamCachingAllocator>(Device{DeviceType::CUDA, i}, *d.source, cap);
    register_allocator(Device{DeviceType::CUDA, i}, d.allocator.get());
    b[i] = std::move(d);
  }
  return n;
}

StreamCachingAllocator& device_allocator(int ordinal) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto& b = backends();
  TESSERA_CHECK(ordinal >= 0 && ordinal < static_cast<int>(b.size()) && b[ordinal].allocator,
                "no CUDA allocator for cuda:", ordinal, " in this process");
  return *b[ordinal].allocator;
}

}  // namespace tessera::cuda
