#include "kernels/tensor_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/fake_device_testing.h"
#include "core/testing.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cuda/cuda_runtime.h"
#include "kernels/device_dispatch.h"

namespace tessera::kernels {
namespace {

// The CPU implementations over host buffers (kernels/cpu/), beside the tensor entry points.
using namespace cpu;

using testing::FakeDeviceAllocator;

Tensor from(const std::vector<float>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.f32()[i] = v[i];
  return t;
}

TEST(TensorOps, ScalarRoundTripsThroughFp32) {
  Tensor t = scalar_tensor(1.0 / 3.0);
  EXPECT_EQ(t.shape(), (Shape{1}));
  EXPECT_EQ(scalar_value(t), static_cast<double>(static_cast<float>(1.0 / 3.0)));
  EXPECT_THROW(scalar_value(Tensor::zeros({2})), Error);
}

TEST(TensorOps, CopyBetweenViews) {
  auto v = testing::random_vector(50, 1);
  Tensor src = from(v), dst = Tensor::zeros({5, 10});
  copy(dst.view({50}).flat_range(10, 20), src.flat_range(0, 20));
  for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(dst.f32()[i], i >= 10 && i < 30 ? v[i - 10] : 0.0f) << i;
  EXPECT_THROW(copy(dst, src.flat_range(0, 49)), Error);
  EXPECT_THROW(copy(Tensor::zeros({50}, DType::I32), src), Error);
}

TEST(TensorOps, SumOfSquaresOfATensorMatchesFloat64AndThePointerKernel) {
  auto v = testing::random_vector(20011, 2);
  double ref = 0;
  for (float x : v) ref += static_cast<double>(x) * x;
  Tensor t = from(v);
  EXPECT_NEAR(sum_of_squares(t), ref, 1e-12 * ref);
  EXPECT_EQ(sum_of_squares(t.view({1, 20011})), sum_of_squares(v.data(), 20011));  // read flat, bitwise
}

// The tensor form of the AdamW step is the pointer kernel on the same memory, bitwise.
TEST(TensorOps, AdamWStepOfTensorsIsThePointerKernel) {
  const int64_t n = 9001;
  auto p = testing::random_vector(n, 3), g = testing::random_vector(n, 4), m = testing::random_vector(n, 5);
  auto v = testing::random_vector(n, 6, 0.0f, 0.1f);
  AdamWHyper h{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 4, 0.5f};
  Tensor tp = from(p), tg = from(g), tm = from(m), tv = from(v);
  adamw_step(p.data(), g.data(), m.data(), v.data(), n, h);
  adamw_step(tp, tg, tm, tv, h);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(tp.f32()[i], p[i]) << i;
    ASSERT_EQ(tm.f32()[i], m[i]) << i;
    ASSERT_EQ(tv.f32()[i], v[i]) << i;
  }
  EXPECT_THROW(adamw_step(tp, tg.flat_range(0, n - 1), tm, tv, h), Error);
}

// A tensor on a device without kernels is refused with its name, never read as host memory. In a CUDA
// build these operations have CUDA implementations: on a machine without a GPU the call gets past the
// device check and fails at CUDA's first call, naming the operation (with a GPU the fake device memory
// below, host memory, must not reach CUDA: the test is then left to kernels/cuda/cuda_tensor_ops_test).
TEST(TensorOps, TensorsOnAnotherDeviceAreRefused) {
  if constexpr (kernels::kWithCuda)
    if (tessera::cuda::device_count() > 0) GTEST_SKIP() << "a GPU is present: kernels/cuda/cuda_tensor_ops_test covers it";
  FakeDeviceAllocator fake;
  const Device cuda{DeviceType::CUDA, 0};
  Allocator* previous = register_allocator(cuda, &fake);
  {
    Tensor on_device = Tensor::zeros({4}, DType::F32, cuda), host = Tensor::zeros({4});
    auto expect = [](auto f, const std::string& text) {
      try {
        f();
        ADD_FAILURE() << "expected an error containing " << text;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
      }
    };
    const std::string refused = kWithCuda ? " failed: cuda" : " on cuda:0 is not available in this build";
    expect([&] { sum_of_squares(on_device); }, "sum_of_squares" + refused);
    expect([&] { scalar_value(on_device.flat_range(0, 1)); }, "scalar_value" + refused);
    expect([&] { scalar_tensor(1.0, cuda); }, "scalar_tensor" + refused);
    expect([&] { copy(host, on_device); }, "copy: tensors on cpu and cuda:0");
    expect([&] { adamw_step(on_device, on_device, on_device, on_device, AdamWHyper{}); }, "adamw_step" + refused);
  }
  register_allocator(cuda, previous);
}

}  // namespace
}  // namespace tessera::kernels
