// The CUDA column copies and sums (kernels/cuda/column_copy.cu) through the tensor entry points, on
// tensors on cuda:0, against the CPU bit for bit: strided and broadcast copies, Multi-Latent Attention's
// (de)interleaving of RoPE dimensions, and sums over repeated rows whose terms span many magnitudes, so
// that any other summation order than the CPU's shows (the test checks that one does). Odd sizes
// throughout. Skipped, with CUDA's reason, where no GPU is present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>

#include "core/tensor.h"
#include "kernels/column_copy.h"
#include "kernels/cuda/device_testing.h"

namespace tessera::cuda {
namespace {

using namespace testing;
using kernels::Columns;
using CudaColumnCopy = CudaKernelTest;

// Uniform values scaled by 2^k, k in [-24, 24] by element: float sums of them depend on their order.
Tensor wide_range(const Shape& shape, uint64_t seed) {
  Tensor t = random(shape, seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = std::ldexp(t.f32()[i], static_cast<int>((i * 7919) % 49) - 24);
  return t;
}

TEST_F(CudaColumnCopy, CopiesMatchTheCpu) {
  // src rows (dst's / repeat), src width, dst width, from, to, count, repeat
  using Case = std::tuple<int64_t, int64_t, int64_t, Columns, Columns, int64_t, int64_t>;
  for (auto [rows, sw, dw, from, to, count, repeat] :
       {Case{1, 1, 1, {0, 1}, {0, 1}, 1, 1}, Case{3, 7, 5, {1, 2}, {2, 1}, 3, 2}, Case{5, 6, 9, {0, 1}, {1, 2}, 4, 1},
        Case{17, 40, 24, {32, 1}, {16, 1}, 8, 5}, Case{129, 33, 70, {3, 3}, {0, 7}, 10, 3},
        Case{300, 64, 64, {0, 1}, {0, 1}, 64, 16}, Case{4, 8, 8, {2, 1}, {2, 1}, 0, 1}}) {
    SCOPED_TRACE(::testing::Message() << rows << " rows x " << repeat << ", widths " << sw << " -> " << dw
                                      << ", columns " << from.first << "/" << from.step << " -> " << to.first
                                      << "/" << to.step << ", " << count);
    const Tensor src = random({rows, sw}, 1);
    // dst starts with values of its own: the columns not written keep them on both devices.
    Tensor dst = random({rows * repeat, dw}, 2), dst_gpu = to_device(dst);
    kernels::copy_columns(to_device(src), from, dst_gpu, to, count, repeat);
    kernels::copy_columns(src, from, dst, to, count, repeat);
    EXPECT_TRUE(same_bits(to_host(dst_gpu), dst));
  }
}

// DeepSeek's interleaved RoPE dimensions to Megatron's halves and back, as model/multi_latent_attention.cc
// calls them: [T, heads, q_head_dim] queries, RoPE part at column nope.
TEST_F(CudaColumnCopy, DeinterleavingAndInterleavingMatchTheCpuAndInvertEachOther) {
  const int64_t rows = 37, heads = 3, nope = 10, pos = 6, width = nope + pos, half = pos / 2;
  const Tensor q = random({rows, heads, width}, 3), q_gpu = to_device(q);
  Tensor pe = Tensor::zeros({rows, heads, pos}), pe_gpu = to_device(pe);
  for (auto [t, dev] : {std::pair<const Tensor*, Tensor*>{&q, &pe}, {&q_gpu, &pe_gpu}}) {
    kernels::copy_columns(*t, {nope, 2}, *dev, {0, 1}, half);
    kernels::copy_columns(*t, {nope + 1, 2}, *dev, {half, 1}, half);
  }
  EXPECT_TRUE(same_bits(to_host(pe_gpu), pe)) << "deinterleave";
  Tensor back = Tensor::zeros({rows, heads, width}), back_gpu = to_device(back);
  for (auto [t, dev] : {std::pair<const Tensor*, Tensor*>{&pe, &back}, {&pe_gpu, &back_gpu}}) {
    kernels::copy_columns(*t, {0, 1}, *dev, {nope, 2}, half);
    kernels::copy_columns(*t, {half, 1}, *dev, {nope + 1, 2}, half);
  }
  const Tensor got = to_host(back_gpu);
  EXPECT_TRUE(same_bits(got, back)) << "interleave";
  for (int64_t r = 0; r < rows * heads; ++r)
    for (int64_t j = nope; j < width; ++j) ASSERT_EQ(got.f32()[r * width + j], q.f32()[r * width + j]) << r << "," << j;
}

TEST_F(CudaColumnCopy, SumsMatchTheCpuBitForBit) {
  // dst rows, repeat, src width, dst width, from, to, count
  using Case = std::tuple<int64_t, int64_t, int64_t, int64_t, Columns, Columns, int64_t>;
  for (auto [rows, repeat, sw, dw, from, to, count] :
       {Case{1, 1, 1, 1, {0, 1}, {0, 1}, 1}, Case{4, 3, 5, 4, {1, 1}, {1, 2}, 2},
        Case{37, 16, 24, 8, {16, 1}, {0, 1}, 8}, Case{129, 128, 192, 64, {128, 1}, {0, 1}, 64},
        Case{11, 7, 30, 31, {2, 3}, {1, 3}, 9}}) {
    SCOPED_TRACE(::testing::Message() << rows << " rows of " << repeat << " terms, widths " << sw << " -> " << dw
                                      << ", " << count << " columns");
    const Tensor src = wide_range({rows * repeat, sw}, 4);
    Tensor dst = random({rows, dw}, 5), dst_gpu = to_device(dst);
    kernels::sum_columns(to_device(src), from, dst_gpu, to, count, repeat);
    kernels::sum_columns(src, from, dst, to, count, repeat);
    EXPECT_TRUE(same_bits(to_host(dst_gpu), dst));
  }
}

// The inputs above can tell orders apart: the CPU's sums of the largest case differ from the same terms
// added last to first somewhere (else bit equality would say nothing about the GPU's order).
TEST(ColumnCopySums, TheTestInputsDependOnTheSummationOrder) {
  const int64_t rows = 129, repeat = 128, sw = 192, count = 64;
  const Tensor src = wide_range({rows * repeat, sw}, 4);
  Tensor dst = Tensor::zeros({rows, count});
  kernels::sum_columns(src, {128, 1}, dst, {0, 1}, count, repeat);
  int64_t differ = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < count; ++j) {
      float reversed = 0;
      for (int64_t i = repeat; i-- > 0;) reversed += src.f32()[(r * repeat + i) * sw + 128 + j];
      differ += reversed != dst.f32()[r * count + j];
    }
  EXPECT_GT(differ, 0);
}

TEST_F(CudaColumnCopy, MixedDevicesAreAnErrorNamingTheKernel) {
  const Tensor src = random({2, 4}, 6);
  Tensor dst_gpu = to_device(Tensor::zeros({2, 4}));
  try {
    kernels::copy_columns(src, {0, 1}, dst_gpu, {0, 1}, 2);
    ADD_FAILURE() << "a CPU source into a GPU destination was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("copy_columns: tensors on cpu and cuda:0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(kernels::sum_columns(to_device(src), {0, 1}, Tensor::zeros({1, 4}), {0, 1}, 2, 2), Error);
  // The checks of the columns hold on the GPU too.
  EXPECT_THROW(kernels::copy_columns(to_device(src), {1, 2}, dst_gpu, {0, 1}, 3), Error);
}

}  // namespace
}  // namespace tessera::cuda
