// The kernel stream (kernels/cuda/cuda_runtime.h): one non-blocking stream per device that every launch,
// cuBLASLt, the device copies and Tensor::zero_ use, so that a chain of them needs no synchronisation but
// the final copy to the host's own and still gives the CPU's result. The GPU tests skip, with CUDA's
// reason, where no GPU is present; the refusal runs everywhere.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/check.h"
#include "kernels/cuda/cuda_runtime.h"
#include "kernels/cuda/device_testing.h"
#include "kernels/elementwise.h"
#include "kernels/linear.h"
#include "kernels/tensor_ops.h"

namespace tessera::cuda {
namespace {

using testing::all_close;
using testing::CudaKernelTest;
using testing::kGpu;
using testing::random;

TEST(KernelStream, AnOrdinalOutOfRangeIsRefusedByName) {
  for (int ordinal : {-1, 64}) {
    try {
      kernel_stream(ordinal);
      FAIL() << "expected cuda:" << ordinal << " to be refused";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("kernel_stream: no cuda:" + std::to_string(ordinal)), std::string::npos)
          << e.what();
    }
  }
}

using KernelStreamTest = CudaKernelTest;

TEST_F(KernelStreamTest, IsOnePerDeviceNonBlockingAndTheCurrentDevicesStream) {
  void* s = kernel_stream(0);
  ASSERT_NE(s, nullptr);  // not the legacy default stream
  EXPECT_EQ(kernel_stream(0), s);
  check(cudaSetDevice(0), "cudaSetDevice");
  EXPECT_EQ(current_kernel_stream(), s);
  unsigned flags = 0;
  check(cudaStreamGetFlags(static_cast<cudaStream_t>(s), &flags), "cudaStreamGetFlags");
  EXPECT_EQ(flags, static_cast<unsigned>(cudaStreamNonBlocking));
}

// y = x w^T + b (cuBLASLt), acc = 0 + y (Tensor::zeros' memset, a kernel), copy = acc (a device copy),
// out = copy / 2: each step reads the one before, queued back to back with no synchronisation between.
Tensor chain(const Tensor& x, const Tensor& w, const Tensor& b, Device device) {
  DefaultDeviceScope on(device);
  Tensor y = Tensor::empty({x.dim(0), w.dim(0)});
  kernels::linear_forward(x, w, b, y);
  Tensor acc = Tensor::zeros(y.shape());
  kernels::add_into(acc, y);
  Tensor copy = acc.clone();
  Tensor out = Tensor::empty(y.shape());
  kernels::scale(copy, 0.5f, out);
  return out;
}

TEST_F(KernelStreamTest, AChainOfKernelsCopiesAndAGemmNeedsOnlyTheLastCopysWaitAndMatchesTheCpu) {
  const int64_t rows = 257, in = 96, out = 48;  // enough work that an unordered read would see it unfinished
  const Tensor x = random({rows, in}, 1), w = random({out, in}, 2), b = random({out}, 3);
  const Tensor want = chain(x, w, b, Device::cpu());
  const Tensor got_device =
      chain(kernels::to_device(x, kGpu), kernels::to_device(w, kGpu), kernels::to_device(b, kGpu), kGpu);
  const Tensor got = kernels::to_device(got_device, Device::cpu());  // waits on the kernel stream only
  // The copy to the host returned after everything queued before it: the stream is idle.
  EXPECT_EQ(cudaStreamQuery(static_cast<cudaStream_t>(kernel_stream(0))), cudaSuccess);
  const float tol = static_cast<float>(1e-5 * (1.0 + std::sqrt(static_cast<double>(in))));  // fp32 GEMM sums
  EXPECT_TRUE(all_close(got, want, 0.0f, tol));
}

}  // namespace
}  // namespace tessera::cuda
