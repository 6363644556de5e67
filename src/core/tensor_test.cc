#include "core/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/fake_device_testing.h"
#include "core/philox.h"

namespace tessera {
namespace {

TEST(Tensor, StorageIsAlignedAndZeroed) {
  Tensor t = Tensor::zeros({3, 5});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u);
  for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(t.f32()[i], 0.0f);
}

TEST(Tensor, ViewsShareStorage) {
  Tensor t = Tensor::empty({4, 3});
  for (int64_t i = 0; i < 12; ++i) t.f32()[i] = static_cast<float>(i);
  Tensor rows = t.narrow(1, 2);
  EXPECT_EQ(rows.shape(), (Shape{2, 3}));
  EXPECT_EQ(rows.f32()[0], 3.0f);
  rows.f32()[0] = -1.0f;
  EXPECT_EQ(t.f32()[3], -1.0f);
  Tensor flat = t.view({12}).flat_range(5, 4);
  EXPECT_EQ(flat.f32()[0], 5.0f);
  EXPECT_EQ(t.view({2, 6}).dim(-1), 6);
}

TEST(Tensor, ErrorsNameBothShapes) {
  Tensor a = Tensor::empty({2, 3}), b = Tensor::empty({3, 2});
  try {
    a.copy_from(b);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 3] vs [3, 2]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(a.view({7}), Error);
  EXPECT_THROW(a.narrow(1, 2), Error);
  EXPECT_THROW(a.i32(), Error);
}

// The host accessors are the raw ones on the CPU (element type checked too).
TEST(Tensor, HostAccessorsReadCpuTensors) {
  Tensor t = Tensor::zeros({2, 3});
  t.host_f32()[4] = 2.5f;
  EXPECT_EQ(t.host_f32(), t.f32());
  EXPECT_EQ(t.host_raw(), t.raw());
  EXPECT_EQ(t.narrow(1, 1).host_f32()[1], 2.5f);
  EXPECT_EQ(Tensor::zeros({2}, DType::BF16).host_bf16()[1], 0);
  EXPECT_EQ(Tensor::zeros({2}, DType::I32).host_i32()[1], 0);
  EXPECT_EQ(Tensor::zeros({2}, DType::I64).host_i64()[1], 0);
  EXPECT_THROW(t.host_i32(), Error);
  EXPECT_THROW(Tensor().host_raw(), Error);
}

using testing::FakeDeviceAllocator;

// On another device they refuse, naming the tensor and its device and saying to copy it to the host;
// the raw ones (for kernels) do not.
TEST(Tensor, HostAccessorsRefuseDeviceTensors) {
  const Device gpu{DeviceType::CUDA, 0};
  FakeDeviceAllocator fake;
  Allocator* previous = register_allocator(gpu, &fake);
  {
    Tensor t = Tensor::zeros({2, 3}, DType::F32, gpu);
    Tensor ids = Tensor::zeros({4}, DType::I32, gpu);
    EXPECT_NE(t.raw(), nullptr);
    auto expect_refused = [](auto read, const std::string& what) {  // what: "host_f32() of a [2, 3] fp32"
      try {
        read();
        ADD_FAILURE() << "expected an error";
      } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(what + " tensor on cuda:0, which is not host memory"), std::string::npos) << msg;
        EXPECT_NE(msg.find("copy it to the host first (kernels::to_device"), std::string::npos) << msg;
      }
    };
    expect_refused([&] { t.host_f32(); }, "host_f32() of a [2, 3] fp32");
    expect_refused([&] { t.host_raw(); }, "host_raw() of a [2, 3] fp32");
    expect_refused([&] { t.narrow(1, 1).host_f32(); }, "host_f32() of a [1, 3] fp32");
    expect_refused([&] { ids.host_i32(); }, "host_i32() of a [4] int32");
    expect_refused([&] { Tensor::zeros({1}, DType::I64, gpu).host_i64(); }, "host_i64() of a [1] int64");
    expect_refused([&] { Tensor::zeros({1}, DType::BF16, gpu).host_bf16(); }, "host_bf16() of a [1] bf16");
  }
  register_allocator(gpu, previous);
}

TEST(Tensor, Bf16RoundsToNearestEven) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_fp32(fp32_to_bf16(3.140625f)), 3.140625f);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties go to the even mantissa (1.0).
  EXPECT_EQ(bf16_to_fp32(fp32_to_bf16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_EQ(bf16_to_fp32(fp32_to_bf16(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);
}

// Known-answer vectors from the Random123 distribution (kat_vectors, philox4x32_10).
TEST(Philox, MatchesRandom123KnownAnswers) {
  auto b = Philox4x32::generate(0, 0, 0, 0, 0, 0);
  EXPECT_EQ(b.v[0], 0x6627e8d5u);
  EXPECT_EQ(b.v[1], 0xe169c58du);
  EXPECT_EQ(b.v[2], 0xbc57ac4cu);
  EXPECT_EQ(b.v[3], 0x9b00dbd8u);
  b = Philox4x32::generate(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu);
  EXPECT_EQ(b.v[0], 0x408f276du);
  EXPECT_EQ(b.v[1], 0x41c83b0eu);
  EXPECT_EQ(b.v[2], 0xa20bc7c6u);
  EXPECT_EQ(b.v[3], 0x6d5451fdu);
  b = Philox4x32::generate(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u);
  EXPECT_EQ(b.v[0], 0xd16cfe09u);
  EXPECT_EQ(b.v[1], 0x94fdccebu);
  EXPECT_EQ(b.v[2], 0x5001e420u);
  EXPECT_EQ(b.v[3], 0x24126ea1u);
}

TEST(Philox, NormalHasUnitMoments) {
  PhiloxStream s(1234, hash_name("layers.0.weight"));
  double sum = 0, sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    double x = s.normal(i);
    sum += x;
    sq += x * x;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sq / n, 1.0, 0.015);
  double u = 0;
  for (int i = 0; i < n; ++i) u += s.uniform(i);
  EXPECT_NEAR(u / n, 0.5, 0.005);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

TEST(TensorMemory, CountsLiveAndPeakBytes) {
  const int64_t before = TensorMemory::live_bytes();
  TensorMemory::reset_peak();
  {
    Tensor a = Tensor::empty({1000});  // 4000 bytes
    Tensor view = a.narrow(0, 10);     // a view allocates nothing
    EXPECT_EQ(TensorMemory::live_bytes(), before + 4000);
    Tensor b = Tensor::empty({500}, DType::I64);
    EXPECT_EQ(TensorMemory::live_bytes(), before + 8000);
  }
  EXPECT_EQ(TensorMemory::live_bytes(), before);
  EXPECT_EQ(TensorMemory::peak_bytes(), before + 8000);
  TensorMemory::reset_peak();
  EXPECT_EQ(TensorMemory::peak_bytes(), before);
}

// Tensors made without a device go to the innermost scope's device, per thread; the scope restores
// the previous one. A device with no allocator (a CPU-only build's GPU) is a clear error.
TEST(DefaultDeviceScope, NestsAndRestores) {
  const Device gpu{DeviceType::CUDA, 0};
  EXPECT_EQ(default_device(), Device::cpu());
  {
    DefaultDeviceScope outer(gpu);
    EXPECT_EQ(default_device(), gpu);
    {
      DefaultDeviceScope inner(Device::cpu());
      EXPECT_EQ(Tensor::zeros({2}).device(), Device::cpu());
    }
    EXPECT_EQ(default_device(), gpu);
    Device other_thread = gpu;
    std::thread([&] { other_thread = default_device(); }).join();
    EXPECT_EQ(other_thread, Device::cpu());
    EXPECT_EQ(Tensor::empty({2}, DType::F32, Device::cpu()).device(), Device::cpu());  // named: as named
  }
  EXPECT_EQ(default_device(), Device::cpu());
}

}  // namespace
}  // namespace tessera
