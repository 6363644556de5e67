// 16-bit GEMM inputs at the tensor entry points (kernels::gemm_buffer_type, kernels::gemm_input,
// kernels::linear_forward/backward): which element type a GEMM reads its inputs in on each device, and
// that the CPU, which multiplies fp32 buffers, gives bit for bit the same results from a weight's
// 16-bit copy (what a GPU's parameter set keeps) as from the fp32 weight it was rounded from. The GPU's
// side is kernels/cuda/cuda_linear_16bit_test.cc.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "core/check.h"
#include "core/testing.h"
#include "kernels/linear.h"
#include "kernels/precision.h"

namespace tessera::kernels {
namespace {

const Device kCpu = Device::cpu(), kGpu{DeviceType::CUDA, 0};

Tensor random(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::F32, kCpu);
  const auto v = tessera::testing::random_vector(static_cast<size_t>(t.numel()), seed);
  std::memcpy(t.raw(), v.data(), t.nbytes());
  return t;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

TEST(Linear16BitInputs, OnlyAGpuReadsSixteenBitBuffersAndOnlyWhileSwitchedOn) {
  for (DType t : {DType::BF16, DType::F16}) {
    EXPECT_EQ(gemm_buffer_type(t, kCpu), DType::F32);
    EXPECT_EQ(gemm_buffer_type(t, kGpu), t);
    set_gpu_16bit_gemm_buffers(false);
    EXPECT_EQ(gemm_buffer_type(t, kGpu), DType::F32);
    set_gpu_16bit_gemm_buffers(true);
  }
  EXPECT_EQ(gemm_buffer_type(DType::F32, kGpu), DType::F32);
  EXPECT_TRUE(gpu_16bit_gemm_buffers());
}

// On the CPU an fp32 input is used as it is (no copy), a 16-bit one widened to the same values that
// rounding the fp32 one gives, and an input of another type is refused naming both types.
TEST(Linear16BitInputs, CpuInputsAreFp32) {
  const Tensor x = random({5, 9}, 1);
  EXPECT_EQ(gemm_input(x, DType::BF16, "x").raw(), x.raw());
  for (DType t : {DType::BF16, DType::F16}) {
    const Tensor widened = gemm_input(store_as(t, x), t, "x");
    Tensor want = Tensor::empty(x.shape(), DType::F32, kCpu);
    round_to(t, x, want);
    EXPECT_EQ(widened.dtype(), DType::F32);
    EXPECT_TRUE(same_bits(widened, want)) << dtype_name(t);
  }
  const std::string wrong = tessera::testing::error_of([&] { gemm_input(store_as(DType::F16, x), DType::BF16, "w"); });
  EXPECT_NE(wrong.find("w: a GEMM input of type fp16 multiplied as bf16"), std::string::npos) << wrong;
  const Tensor ids = Tensor::zeros({4}, DType::I32, kCpu);
  EXPECT_NE(tessera::testing::error_of([&] { gemm_input(ids, DType::BF16, "x"); }).find("of type int32"),
            std::string::npos);
}

// A weight's 16-bit copy through the CPU's linear layer: bitwise the fp32 weight's results (the GEMM
// rounds that one to the same values), forward and backward.
TEST(Linear16BitInputs, CpuLinearFromA16BitWeightIsBitwiseTheFp32Weights) {
  const int64_t rows = 13, in = 37, out = 11;
  const Tensor x = random({rows, in}, 2), w = random({out, in}, 3), b = random({out}, 4), dy = random({rows, out}, 5);
  for (DType t : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(t));
    const Tensor w16 = store_as(t, w);
    Tensor y = Tensor::empty({rows, out}, DType::F32, kCpu), y16 = Tensor::empty({rows, out}, DType::F32, kCpu);
    linear_forward(x, w, b, y, t);
    linear_forward(x, w16, b, y16, t);
    EXPECT_TRUE(same_bits(y16, y));
    Tensor dx = Tensor::empty({rows, in}, DType::F32, kCpu), dw = random({out, in}, 6), db = random({out}, 7);
    Tensor dx16 = dx.clone(), dw16 = dw.clone(), db16 = db.clone();
    linear_backward(dy, x, w, dx, dw, db, t);
    linear_backward(dy, x, w16, dx16, dw16, db16, t);
    EXPECT_TRUE(same_bits(dx16, dx));
    EXPECT_TRUE(same_bits(dw16, dw));
    EXPECT_TRUE(same_bits(db16, db));
  }
}

}  // namespace
}  // namespace tessera::kernels
