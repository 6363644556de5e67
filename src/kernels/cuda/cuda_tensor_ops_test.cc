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

// A tensor's own methods on device memory (through the CUDA allocator's memory operations), and
// transfers between the host and the GPU.
TEST_F(CudaTensorOps, TensorMethodsAndTransfers) {
  const Tensor x = random({257, 3}, 3);
  const Tensor x_gpu = kernels::to_device(x, kGpu);
  EXPECT_EQ(x_gpu.device(), kGpu);
  EXPECT_EQ(kernels::to_device(x_gpu, kGpu).raw(), x_gpu.raw());  // already there
  EXPECT_TRUE(same_bits(kernels::to_device(x_gpu, Device::cpu()), x));

  const Tensor z = Tensor::zeros({1000}, DType::F32, kGpu);
  EXPECT_TRUE(same_bits(to_host(z), Tensor::zeros({1000})));
  const Tensor ones = Tensor::empty({1000}, DType::F32, kGpu);
  ones.fill_(1.5f);
  Tensor want = Tensor::empty({1000});
  want.fill_(1.5f);
  EXPECT_TRUE(same_bits(to_host(ones), want));

  const Tensor c = x_gpu.clone();
  EXPECT_NE(c.raw(), x_gpu.raw());
  EXPECT_TRUE(same_bits(to_host(c), x));
  c.narrow(1, 2).zero_();  // rows 1 and 2 only
  Tensor partly = x.clone();
  partly.narrow(1, 2).zero_();
  EXPECT_TRUE(same_bits(to_host(c), partly));
  x_gpu.copy_from(c);
  EXPECT_TRUE(same_bits(to_host(x_gpu), partly));

  Tensor back = Tensor::empty({3, 257});
  kernels::transfer(back, x_gpu);  // shapes may differ
  EXPECT_TRUE(same_bits(back.view({257, 3}), partly));
  EXPECT_THROW(x_gpu.copy_from(x), Error);  // the host to the GPU is a transfer
  EXPECT_THROW(kernels::transfer(x_gpu, Tensor::empty({5})), Error);
}

}  // namespace
}  // namespace tessera::cuda
