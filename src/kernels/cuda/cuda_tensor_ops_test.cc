// The tensor operations that move data for the layers above (kernels/tensor_ops.h) on tensors on
// cuda:0: a scalar there and back, host ids brought in, copies on the device (overlapping ranges
// refused, since cudaMemcpy would garble them). Skipped, with CUDA's reason, where no GPU is present.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/cuda/device_testing.h"
#include "kernels/tensor_ops.h"

namespace tessera::cuda {
namespace {

using namespace testing;
using CudaTensorOps = CudaKernelTest;

TEST_F(CudaTensorOps, ScalarsGoThereAndBack) {
  const Tensor s = kernels::scalar_tensor(2.5, kGpu);
  EXPECT_EQ(s.device(), kGpu);
  EXPECT_EQ(kernels::scalar_value(s), 2.5);
  EXPECT_EQ(kernels::scalar_value(kernels::scalar_tensor(0.1, kGpu)), static_cast<double>(0.1f));  // fp32
  EXPECT_THROW(kernels::scalar_value(to_device(random({2}, 1))), Error);
}

TEST_F(CudaTensorOps, HostIdsAndCopies) {
  const std::vector<int32_t> ids = {3, -1, 7, 65536, 0};
  const Tensor t = kernels::from_host(ids, kGpu);
  EXPECT_EQ(t.device(), kGpu);
  EXPECT_TRUE(same_bits(to_host(t), kernels::from_host(ids)));
  EXPECT_EQ(kernels::from_host({}, kGpu).numel(), 0);

  const Tensor x = random({1001}, 2), x_gpu = to_device(x);
  Tensor y_gpu = to_device(Tensor::zeros({7, 143}));
  kernels::copy(y_gpu, x_gpu);  // shapes may differ
  EXPECT_TRUE(same_bits(to_host(y_gpu).view({1001}), x));
  kernels::copy(x_gpu, x_gpu);  // the same range: nothing to do
  EXPECT_THROW(kernels::copy(x_gpu.flat_range(0, 500), x_gpu.flat_range(1, 500)), Error);  // overlapping
  EXPECT_THROW(kernels::copy(y_gpu, x), Error);  // two devices
}

}  // namespace
}  // namespace tessera::cuda
