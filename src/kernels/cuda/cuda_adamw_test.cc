// The CUDA AdamW step and sum of squares (kernels/cuda/adamw.cu) through the tensor entry points, on
// tensors on cuda:0, against the CPU kernels on the same random inputs: several steps with the clipping
// factor and weight decay, sizes around the CPU's SIMD and chunk boundaries, the sum of squares in
// double, deterministic, and non-finite exactly where the CPU's is (the loss scaler's overflow check).
// Skipped, with CUDA's reason, where no GPU is present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/tensor.h"
#include "kernels/adamw.h"
#include "kernels/cuda/device_testing.h"

namespace tessera::cuda {
namespace {

using namespace testing;
using CudaAdamW = CudaKernelTest;

const int64_t kSizes[] = {1, 7, 8, 9, 8191, 8192, 8193, 100003};

TEST_F(CudaAdamW, StepsMatchTheCpu) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(n);
    Tensor p = random({n}, 1), m = random({n}, 2, -0.1f, 0.1f), v = random({n}, 3, 0.0f, 0.01f);
    Tensor p_gpu = to_device(p), m_gpu = to_device(m), v_gpu = to_device(v);
    for (int64_t step = 1; step <= 3; ++step) {
      const Tensor g = random({n}, 10 + step, -2.0f, 2.0f);
      kernels::AdamWHyper h{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step, 0.37f};
      kernels::adamw_step(p_gpu, to_device(g), m_gpu, v_gpu, h);
      kernels::adamw_step(p, g, m, v, h);
    }
    // The same formula with each operation rounded on its own (no fused multiply-adds on either side),
    // so the same bits: a moment whose two terms nearly cancel differs by many ulps when one side fuses.
    EXPECT_TRUE(same_bits(to_host(p_gpu), p)) << "param";
    EXPECT_TRUE(same_bits(to_host(m_gpu), m)) << "exp_avg";
    EXPECT_TRUE(same_bits(to_host(v_gpu), v)) << "exp_avg_sq";
  }
}

TEST_F(CudaAdamW, AStepBeforeTheFirstIsRefused) {
  Tensor t = to_device(random({4}, 4));
  EXPECT_THROW(kernels::adamw_step(t, t, t, t, kernels::AdamWHyper{1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 0, 1.0f}), Error);
}

TEST_F(CudaAdamW, SumOfSquaresMatchesTheCpuAndIsDeterministic) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(n);
    const Tensor x = random({n}, 5, -3.0f, 3.0f), x_gpu = to_device(x);
    const double cpu = kernels::sum_of_squares(x), gpu = kernels::sum_of_squares(x_gpu);
    EXPECT_NEAR(gpu, cpu, 1e-12 * cpu);  // double sums of the same fp32 squares, in another order
    EXPECT_EQ(kernels::sum_of_squares(x_gpu), gpu);
  }
  EXPECT_EQ(kernels::sum_of_squares(to_device(Tensor::empty({0}))), 0.0);
}

// An overflowed gradient (inf) or a NaN makes the sum non-finite, which skips the step: the loss
// scaler's overflow check, wherever the bad element sits.
TEST_F(CudaAdamW, NonFiniteGradientsGiveANonFiniteSum) {
  const int64_t n = 20001;
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    for (int64_t at : {int64_t{0}, int64_t{8192}, n - 1}) {
      Tensor g = random({n}, 6);
      g.f32()[at] = bad;
      const double cpu = kernels::sum_of_squares(g), gpu = kernels::sum_of_squares(to_device(g));
      EXPECT_FALSE(std::isfinite(gpu)) << bad << " at " << at;
      EXPECT_EQ(std::isnan(gpu), std::isnan(cpu)) << bad << " at " << at;
    }
  }
  // Large but finite fp32 values square without overflow in double.
  Tensor big = Tensor::empty({3});
  big.fill_(3e38f);
  EXPECT_TRUE(std::isfinite(kernels::sum_of_squares(to_device(big))));
}

// The one-launch gradient norm: the CPU counterpart's blocked order exactly, so the same bits of the sum,
// the norm and the clip factor (sizes around the chunk and lane boundaries, a loss scale, clipping off),
// and a NaN clip factor where the gradients overflow.
TEST_F(CudaAdamW, OneLaunchGradNormMatchesTheCpuBitForBit) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{255}, int64_t{257}, int64_t{8192}, int64_t{8193}, int64_t{3000001}}) {
    for (float clip : {0.0f, 1.0f}) {
      SCOPED_TRACE(::testing::Message() << n << " clip " << clip);
      const Tensor x = random({n}, 21, -3.0f, 3.0f);
      Tensor s_cpu = Tensor::zeros({kernels::kStepScalarWords}, DType::I64, Device::cpu());
      Tensor s_gpu = Tensor::zeros({kernels::kStepScalarWords}, DType::I64, kGpu);
      kernels::grad_norm_and_clip(to_device(x), s_gpu, clip, 128.0f);
      kernels::grad_norm_and_clip(x, s_cpu, clip, 128.0f);
      const kernels::StepScalars gpu = kernels::read_step_scalars(s_gpu), cpu = kernels::read_step_scalars(s_cpu);
      EXPECT_EQ(gpu.sum_of_squares, cpu.sum_of_squares);
      EXPECT_EQ(gpu.grad_norm, cpu.grad_norm);
      EXPECT_EQ(gpu.clip_scale, cpu.clip_scale);
    }
  }
  Tensor x = random({20000}, 22);
  x.f32()[12345] = std::numeric_limits<float>::infinity();
  Tensor s = Tensor::zeros({kernels::kStepScalarWords}, DType::I64, kGpu);
  kernels::grad_norm_and_clip(to_device(x), s, 1.0f, 1.0f);
  EXPECT_TRUE(std::isnan(kernels::read_step_scalars(s).clip_scale));
}

// The multi-tensor step (one launch over a segment table, the clip factor read on the device) gives the
// CPU counterpart's bits; with an overflowed norm it changes nothing.
TEST_F(CudaAdamW, MultiTensorStepMatchesTheCpuBitForBit) {
  const std::vector<kernels::AdamWSegment> segments = {{0, 100, 0, true}, {150, 7, 100, false},
                                                       {157, 100000, 107, true}, {100157, 1, 100107, false}};
  const int64_t params = 100200, state = 100108;
  for (bool overflow : {false, true}) {
    SCOPED_TRACE(overflow);
    Tensor p = random({params}, 23), g = random({params}, 24, -0.1f, 0.1f);
    Tensor m = random({state}, 25, -0.01f, 0.01f), v = random({state}, 26, 0.0f, 1e-4f);
    if (overflow) g.f32()[200] = std::numeric_limits<float>::quiet_NaN();
    Tensor p_gpu = to_device(p), m_gpu = to_device(m), v_gpu = to_device(v);
    const Tensor g_gpu = to_device(g);
    const Tensor p0 = p.clone();
    Tensor s_cpu = Tensor::zeros({kernels::kStepScalarWords}, DType::I64, Device::cpu());
    Tensor s_gpu = Tensor::zeros({kernels::kStepScalarWords}, DType::I64, kGpu);
    const auto table_cpu = kernels::adamw_segment_table(segments, params, state, Device::cpu());
    const auto table_gpu = kernels::adamw_segment_table(segments, params, state, kGpu);
    for (int64_t step = 1; step <= 2; ++step) {
      const kernels::AdamWHyper h{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step, 1.0f};
      kernels::grad_norm_and_clip(g_gpu, s_gpu, 1.0f, 1.0f);
      kernels::adamw_multi_step(p_gpu, g_gpu, m_gpu, v_gpu, table_gpu, h, s_gpu);
      kernels::grad_norm_and_clip(g, s_cpu, 1.0f, 1.0f);
      kernels::adamw_multi_step(p, g, m, v, table_cpu, h, s_cpu);
    }
    EXPECT_TRUE(same_bits(to_host(p_gpu), p)) << "param";
    EXPECT_TRUE(same_bits(to_host(m_gpu), m)) << "exp_avg";
    EXPECT_TRUE(same_bits(to_host(v_gpu), v)) << "exp_avg_sq";
    EXPECT_EQ(same_bits(p, p0), overflow);
  }
}

}  // namespace
}  // namespace tessera::cuda
