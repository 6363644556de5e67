// The CUDA AdamW step and sum of squares (kernels/cuda/adamw.cu) through the tensor entry points, on
// tensors on cuda:0, against the CPU kernels on the same random inputs: several steps with the clipping
// factor and weight decay, sizes around the CPU's SIMD and chunk boundaries, the sum of squares in
// double, deterministic, and non-finite exactly where the CPU's is (the loss scaler's overflow check).
// Skipped, with CUDA's reason, where no GPU is present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

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

}  // namespace
}  // namespace tessera::cuda
