// The CUDA pointwise kernels (kernels/cuda/pointwise.cu) through the tensor entry points, on tensors
// on cuda:0, against the CPU kernels on the same random inputs: elementwise arithmetic, the precision
// conversions (bit for bit: both round to nearest even), GELU, SwiGLU and tanh with their gradients,
// dropout (bit for bit: the same Philox mask), RoPE forward and backward, over several sizes including
// odd ones. Skipped, with CUDA's reason, where no GPU is present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "kernels/activations.h"
#include "kernels/dropout.h"
#include "kernels/cuda/device_testing.h"
#include "kernels/elementwise.h"
#include "kernels/precision.h"
#include "kernels/rotary.h"
#include "kernels/tensor_ops.h"

namespace tessera::cuda {
namespace {

using namespace testing;
using CudaPointwise = CudaKernelTest;

const int64_t kSizes[] = {1, 7, 256, 1000, 4097, 300001};
// fp32 results differ from the CPU's by the order of fused multiply-adds (and tanhf's last bits);
// rounded outputs by at most one unit of the 16-bit type where the fp32 value sat near a tie.
constexpr float kF32Tol = 2e-6f;
float rounded_tol(DType t) { return t == DType::BF16 ? 8e-3f : t == DType::F16 ? 1e-3f : kF32Tol; }

TEST_F(CudaPointwise, ElementwiseArithmeticMatchesTheCpu) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(n);
    Tensor a = random({n}, 1), b = random({n}, 2);
    Tensor a_gpu = to_device(a);
    kernels::add_into(a_gpu, to_device(b));
    kernels::add_into(a, b);
    EXPECT_TRUE(same_bits(to_host(a_gpu), a));  // one addition rounds alike everywhere

    Tensor out = Tensor::empty({n}), out_gpu = to_device(out);
    kernels::scale(to_device(b), -0.37f, out_gpu);
    kernels::scale(b, -0.37f, out);
    EXPECT_TRUE(same_bits(to_host(out_gpu), out));
  }
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {17, 130}, {5, 1031}}) {
    Tensor y = random({rows, cols}, 3), bias = random({cols}, 4);
    Tensor y_gpu = to_device(y);
    kernels::add_bias_rows(y_gpu, to_device(bias));
    kernels::add_bias_rows(y, bias);
    EXPECT_TRUE(same_bits(to_host(y_gpu), y)) << rows << "x" << cols;
  }
}

// Values that exercise the rounding's corners: ties, overflow past fp16's range, subnormals, infinities.
Tensor rounding_corners(int64_t n, uint64_t seed) {
  Tensor t = random({n}, seed, -70000.0f, 70000.0f);
  const float special[] = {0.0f, -0.0f, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 65504.0f, 65520.0f, 1e-7f, -3e-8f,
                           1e-40f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::max()};
  for (int64_t i = 0; i < n; ++i) {
    if (i % 3 == 0) t.f32()[i] *= 1e-5f;  // small magnitudes too
    if (i % 7 == 0) t.f32()[i] = special[(i / 7) % std::size(special)];
  }
  return t;
}

TEST_F(CudaPointwise, PrecisionConversionsAreTheCpusBitForBit) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(n);
    const Tensor x = rounding_corners(n, 5);
    for (DType t : {DType::F32, DType::BF16, DType::F16}) {
      SCOPED_TRACE(dtype_name(t));
      Tensor out = Tensor::empty({n}), out_gpu = to_device(out);
      kernels::round_to(t, to_device(x), out_gpu);
      kernels::round_to(t, x, out);
      EXPECT_TRUE(same_bits(to_host(out_gpu), out));
      Tensor in_place = to_device(x);
      kernels::round_to(t, in_place, in_place);
      EXPECT_TRUE(same_bits(to_host(in_place), out));
      if (t == DType::F32) continue;
      const Tensor stored = kernels::store_as(t, x), stored_gpu = kernels::store_as(t, to_device(x));
      EXPECT_EQ(stored_gpu.device(), kGpu);
      EXPECT_TRUE(same_bits(to_host(stored_gpu), stored));
      const Tensor widened_gpu = kernels::to_fp32(stored_gpu);
      EXPECT_EQ(widened_gpu.device(), kGpu);
      EXPECT_TRUE(same_bits(to_host(widened_gpu), kernels::to_fp32(stored)));
    }
  }
}

TEST_F(CudaPointwise, StoringSeveralTensorsConvertsEachOnTheGpu) {
  Tensor a = to_device(random({5, 3}, 6)), b = to_device(random({1001}, 7)), none;
  const Tensor a_host = to_host(a), b_host = to_host(b);
  std::vector<Tensor*> tensors = {&a, &none, &b};
  kernels::store_all_as(DType::BF16, tensors);
  EXPECT_EQ(a.dtype(), DType::BF16);
  EXPECT_EQ(b.device(), kGpu);
  EXPECT_TRUE(same_bits(to_host(a), kernels::store_as(DType::BF16, a_host)));
  EXPECT_TRUE(same_bits(to_host(b), kernels::store_as(DType::BF16, b_host)));
  kernels::all_to_fp32(tensors);
  EXPECT_EQ(b.dtype(), DType::F32);
  EXPECT_FALSE(none.defined());
  Tensor mixed = random({4}, 8);
  std::vector<Tensor*> two_devices = {&a, &mixed};
  EXPECT_THROW(kernels::store_all_as(DType::BF16, two_devices), Error);
}

TEST_F(CudaPointwise, GeluAndTanhMatchTheCpu) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(n);
    const Tensor x = random({n}, 9, -6.0f, 6.0f), dy = random({n}, 10);
    for (DType t : {DType::F32, DType::BF16, DType::F16}) {
      Tensor y = Tensor::empty({n}), y_gpu = to_device(y);
      kernels::gelu_forward(to_device(x), y_gpu, t);
      kernels::gelu_forward(x, y, t);
      EXPECT_TRUE(all_close(to_host(y_gpu), y, rounded_tol(t), 1e-6f)) << dtype_name(t);
    }
    Tensor dx = Tensor::empty({n}), dx_gpu = to_device(dx);
    kernels::gelu_backward(to_device(x), to_device(dy), dx_gpu);
    kernels::gelu_backward(x, dy, dx);
    EXPECT_TRUE(all_close(to_host(dx_gpu), dx, kF32Tol, 1e-6f));
    Tensor in_place = to_device(dy);  // dx may be dy
    kernels::gelu_backward(to_device(x), in_place, in_place);
    EXPECT_TRUE(all_close(to_host(in_place), dx, kF32Tol, 1e-6f));

    Tensor th = Tensor::empty({n}), th_gpu = to_device(th);
    kernels::tanh_forward(to_device(x), th_gpu);
    kernels::tanh_forward(x, th);
    EXPECT_TRUE(all_close(to_host(th_gpu), th, kF32Tol, 1e-6f));
    kernels::tanh_backward(to_device(th), to_device(dy), dx_gpu);
    kernels::tanh_backward(th, dy, dx);
    EXPECT_TRUE(all_close(to_host(dx_gpu), dx, kF32Tol, 1e-6f));
  }
}

TEST_F(CudaPointwise, SwigluMatchesTheCpu) {
  for (auto [rows, width] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {17, 130}, {5, 1031}, {64, 2048}}) {
    SCOPED_TRACE(::testing::Message() << rows << "x" << width);
    const Tensor x = random({rows, 2 * width}, 11, -5.0f, 5.0f), dy = random({rows, width}, 12);
    for (DType t : {DType::F32, DType::BF16, DType::F16}) {
      Tensor y = Tensor::empty({rows, width}), y_gpu = to_device(y);
      kernels::swiglu_forward(to_device(x), y_gpu, t);
      kernels::swiglu_forward(x, y, t);
      EXPECT_TRUE(all_close(to_host(y_gpu), y, rounded_tol(t), 1e-6f)) << dtype_name(t);
    }
    Tensor dx = Tensor::empty({rows, 2 * width}), dx_gpu = to_device(dx);
    kernels::swiglu_backward(to_device(x), to_device(dy), dx_gpu);
    kernels::swiglu_backward(x, dy, dx);
    EXPECT_TRUE(all_close(to_host(dx_gpu), dx, kF32Tol, 1e-6f));
  }
}

// The mask is drawn from the same Philox elements as on the CPU, so forward and backward are the CPU's
// bit for bit, for regions placed anywhere in the global tensor (hidden sizes not a multiple of the
// 4-word Philox block, offsets that start mid-block), in place too.
TEST_F(CudaPointwise, DropoutIsTheCpusBitForBit) {
  const kernels::DropoutRegion regions[] = {
      {1, 1, 1, 0, 1, 0}, {5, 3, 7, 2, 9, 1}, {16, 2, 1030, 16, 64, 3}, {128, 4, 768, 0, 128, 0}};
  for (const kernels::DropoutRegion& r : regions) {
    const int64_t n = r.seq * r.batch * r.hidden;
    SCOPED_TRACE(n);
    const Tensor x = random({n}, 13);
    for (float p : {0.0f, 0.1f, 0.5f}) {
      Tensor y = Tensor::empty({n}), y_gpu = to_device(y);
      kernels::dropout_forward(to_device(x), y_gpu, p, 1234, 7, r);
      kernels::dropout_forward(x, y, p, 1234, 7, r);
      EXPECT_TRUE(same_bits(to_host(y_gpu), y)) << "p " << p;
      Tensor dx = to_device(x);  // dx may be dy
      kernels::dropout_backward(dx, dx, p, 1234, 7, r);
      kernels::dropout_backward(x, y, p, 1234, 7, r);
      EXPECT_TRUE(same_bits(to_host(dx), y)) << "p " << p;
    }
  }
  Tensor x = to_device(random({4}, 14));
  EXPECT_THROW(kernels::dropout_forward(x, x, 1.0f, 1, 2, {4, 1, 1, 0, 4, 0}), Error);  // p must be < 1
}

// Angles and cos/sin in double on both (the GPU's pow, cos and sin may differ from glibc's in the last
// double bits, rarely a float ulp of cos/sin), the rotation in fp32; dimensions past rot_dim untouched.
TEST_F(CudaPointwise, RopeMatchesTheCpu) {
  struct Case {
    int64_t rows, heads, head_dim, rot_dim;
  };
  for (const Case& c : {Case{1, 1, 2, 2}, Case{7, 3, 64, 64}, Case{33, 4, 128, 64}, Case{129, 12, 80, 20}}) {
    SCOPED_TRACE(::testing::Message() << c.rows << " rows, " << c.heads << " heads, " << c.head_dim << "/" << c.rot_dim);
    std::vector<int32_t> pos(static_cast<size_t>(c.rows));
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>((i * 97) % 4099);
    const Tensor positions = kernels::from_host(pos), positions_gpu = to_device(positions);
    const Tensor x = random({c.rows, c.heads, c.head_dim}, 15);
    Tensor y = x.clone(), y_gpu = to_device(x);
    kernels::rope_forward(y_gpu, positions_gpu, c.rot_dim, 10000.0f);
    kernels::rope_forward(y, positions, c.rot_dim, 10000.0f);
    EXPECT_TRUE(all_close(to_host(y_gpu), y, 2e-6f, 1e-6f)) << "forward";
    kernels::rope_backward(y_gpu, positions_gpu, c.rot_dim, 10000.0f);
    kernels::rope_backward(y, positions, c.rot_dim, 10000.0f);
    EXPECT_TRUE(all_close(to_host(y_gpu), y, 2e-6f, 1e-6f)) << "backward";
    EXPECT_TRUE(all_close(to_host(y_gpu), x, 1e-5f, 1e-5f)) << "the backward undoes the forward";
  }
  Tensor x = to_device(random({2, 1, 8}, 16));
  EXPECT_THROW(kernels::rope_forward(x, to_device(kernels::from_host({0, 1})), 3, 10000.0f), Error);  // odd rot_dim
}

// The scaled frequencies (Llama 3.x's three bands, linear, and YaRN's ramp, as multi-latent attention
// rotates its RoPE part: DeepSeek-V3's factor 40 over 4096 positions, and a short original context whose
// ramp falls inside the 32 pairs) are the shared math's on both devices.
TEST_F(CudaPointwise, ScaledRopeMatchesTheCpu) {
  using kernels::math::RopeScalingType;
  const kernels::math::RopeScaling scalings[] = {{RopeScalingType::kLlama3, 8.0, 1.0, 4.0, 64.0},
                                                 {RopeScalingType::kLinear, 4.0},
                                                 {RopeScalingType::kYarn, 40.0, 1.0, 4.0, 4096.0, 32.0, 1.0},
                                                 {RopeScalingType::kYarn, 4.0, 1.0, 4.0, 32.0, 32.0, 1.0}};
  std::vector<int32_t> pos(40);
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>((i * 97) % 4099);
  const Tensor positions = kernels::from_host(pos), positions_gpu = to_device(positions);
  for (const kernels::math::RopeScaling& s : scalings) {
    const Tensor x = random({40, 3, 64}, 17);
    Tensor y = x.clone(), y_gpu = to_device(x);
    kernels::rope_forward(y_gpu, positions_gpu, 64, 10000.0f, s);
    kernels::rope_forward(y, positions, 64, 10000.0f, s);
    EXPECT_TRUE(all_close(to_host(y_gpu), y, 2e-6f, 1e-6f)) << "forward, type " << static_cast<int>(s.type);
    kernels::rope_backward(y_gpu, positions_gpu, 64, 10000.0f, s);
    kernels::rope_backward(y, positions, 64, 10000.0f, s);
    EXPECT_TRUE(all_close(to_host(y_gpu), y, 2e-6f, 1e-6f)) << "backward, type " << static_cast<int>(s.type);
  }
}

}  // namespace
}  // namespace tessera::cuda
