// The CUDA softmax cross-entropy (kernels/cuda/cross_entropy.cu) through the tensor entry points, on
// tensors on cuda:0, against the CPU kernel on the same random logits: the shard statistics (the max
// and the target's logit bit for bit, the sum of exponentials to fp32 rounding), whole vocabularies and
// shards, the in-place backward with fp32 and 16-bit outputs, and the vocab-parallel combination
// (rescaled sums, masked loss sum). Skipped, with CUDA's reason, where no
// GPU is present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "kernels/cross_entropy.h"
#include "kernels/cuda/device_testing.h"
#include "kernels/tensor_ops.h"
#include "kernels/vocab_parallel_loss.h"

namespace tessera::cuda {
namespace {

using namespace testing;
using CudaCrossEntropy = CudaKernelTest;

struct Case {
  int64_t rows, vocab_local, vocab_begin;
  int32_t vocab_total;
};
// {4, 2, 0, 2}: BERT's sentence-order head, two logits per sample.
const Case kCases[] = {{1, 1, 0, 1}, {4, 2, 0, 2}, {3, 7, 0, 7}, {5, 1031, 1031, 3000}, {16, 4099, 0, 8000},
                       {4, 50304, 0, 50304}};

TEST_F(CudaCrossEntropy, ShardStatisticsMatchTheCpu) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(::testing::Message() << c.rows << "x" << c.vocab_local << " from " << c.vocab_begin);
    Tensor logits = random({c.rows, c.vocab_local}, 1, -8.0f, 8.0f);
    if (c.rows > 2) logits.f32()[c.vocab_local + c.vocab_local / 2] = 40.0f;  // one dominant logit
    const Tensor targets = random_ids(c.rows, c.vocab_total, 2);
    Tensor max = Tensor::empty({c.rows}), sum = Tensor::empty({c.rows}), tl = Tensor::empty({c.rows});
    Tensor max_gpu = to_device(max), sum_gpu = to_device(sum), tl_gpu = to_device(tl);
    kernels::cross_entropy_shard_stats(to_device(logits), to_device(targets), max_gpu, sum_gpu, tl_gpu, c.vocab_begin);
    kernels::cross_entropy_shard_stats(logits, targets, max, sum, tl, c.vocab_begin);
    EXPECT_TRUE(same_bits(to_host(max_gpu), max));
    EXPECT_TRUE(same_bits(to_host(tl_gpu), tl));
    EXPECT_TRUE(all_close(to_host(sum_gpu), sum, 2e-6f, 0.0f));  // exp_approx's FMAs, another order
  }
}

TEST_F(CudaCrossEntropy, ANanLogitReachesTheStatistics) {
  Tensor logits = random({2, 100}, 3);
  logits.f32()[150] = std::numeric_limits<float>::quiet_NaN();
  const Tensor targets = kernels::from_host({1, 2});
  Tensor max = to_device(Tensor::zeros({2})), sum = to_device(Tensor::zeros({2})), tl = to_device(Tensor::zeros({2}));
  kernels::cross_entropy_shard_stats(to_device(logits), to_device(targets), max, sum, tl, 0);
  const Tensor m = to_host(max);
  EXPECT_FALSE(std::isnan(m.f32()[0]));
  EXPECT_TRUE(std::isnan(m.f32()[1]));
}

TEST_F(CudaCrossEntropy, BackwardMatchesTheCpu) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(::testing::Message() << c.rows << "x" << c.vocab_local << " from " << c.vocab_begin);
    const Tensor logits = random({c.rows, c.vocab_local}, 4, -8.0f, 8.0f);
    const Tensor targets = random_ids(c.rows, c.vocab_total, 5);
    const Tensor lse = random({c.rows}, 6, 8.0f, 12.0f), dloss = random({c.rows}, 7, 0.1f, 1.0f);
    for (DType t : {DType::F32, DType::BF16, DType::F16}) {
      Tensor d = logits.clone(), d_gpu = to_device(logits);
      kernels::cross_entropy_backward(d_gpu, to_device(targets), to_device(lse), to_device(dloss), c.vocab_begin, t);
      kernels::cross_entropy_backward(d, targets, lse, dloss, c.vocab_begin, t);
      // An ulp apart before rounding can be one unit of the 16-bit type apart after (fp16's subnormal
      // step is 6e-8 where the gradients are that small).
      const float rtol = t == DType::BF16 ? 8e-3f : t == DType::F16 ? 1e-3f : 2e-6f;
      EXPECT_TRUE(all_close(to_host(d_gpu), d, rtol, t == DType::F16 ? 6e-8f : 1e-12f)) << dtype_name(t);
    }
  }
}

// The fused training pass (one block per row): the unfused GPU calls' bits with fp32 logits (the same
// reductions in the same order), the CPU's fused pass within the tolerances above; bf16 logits within a
// bf16 unit of the CPU's.
TEST_F(CudaCrossEntropy, FusedMatchesTheUnfusedCallsAndTheCpu) {
  for (const Case& c : kCases) {
    if (c.vocab_begin != 0 || c.vocab_local != c.vocab_total) continue;  // the whole vocabulary on one rank
    SCOPED_TRACE(::testing::Message() << c.rows << "x" << c.vocab_local);
    const Tensor logits = random({c.rows, c.vocab_local}, 13, -8.0f, 8.0f);
    const Tensor targets = random_ids(c.rows, c.vocab_total, 14), dloss = random({c.rows}, 15, 0.1f, 1.0f);
    const Tensor targets_gpu = to_device(targets), dloss_gpu = to_device(dloss);
    auto row = [&] { return Tensor::empty({c.rows}, DType::F32, kGpu); };
    for (DType t : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(dtype_name(t));
      // Unfused on the GPU.
      Tensor u = to_device(logits), umax = row(), usum = row(), utl = row(), ulse = row();
      kernels::cross_entropy_shard_stats(u, targets_gpu, umax, usum, utl, 0);
      kernels::masked_loss_sum(umax, usum, utl, to_device(Tensor::zeros({c.rows}, DType::F32, Device::cpu())), ulse);
      kernels::cross_entropy_backward(u, targets_gpu, ulse, dloss_gpu, 0, t);
      // Fused on the GPU and on the CPU.
      Tensor f = to_device(logits), fmax = row(), fsum = row(), ftl = row(), flse = row();
      kernels::cross_entropy_fused(f, targets_gpu, dloss_gpu, fmax, fsum, ftl, flse, t);
      Tensor h = logits.clone(), hmax = Tensor::empty({c.rows}, DType::F32, Device::cpu());
      Tensor hsum = hmax.clone(), htl = hmax.clone(), hlse = hmax.clone();
      kernels::cross_entropy_fused(h, targets, dloss, hmax, hsum, htl, hlse, t);
      EXPECT_TRUE(same_bits(to_host(f), to_host(u)));
      EXPECT_TRUE(same_bits(to_host(flse), to_host(ulse)));
      EXPECT_TRUE(same_bits(to_host(fmax), hmax));
      EXPECT_TRUE(same_bits(to_host(ftl), htl));
      EXPECT_TRUE(all_close(to_host(fsum), hsum, 2e-6f, 0.0f));
      EXPECT_TRUE(all_close(to_host(flse), hlse, 1e-6f, 1e-6f));
      EXPECT_TRUE(all_close(to_host(f), h, t == DType::BF16 ? 8e-3f : 2e-6f, 1e-12f));
    }
  }
}

TEST_F(CudaCrossEntropy, FusedOnBf16LogitsMatchesTheCpu) {
  for (const Case& c : kCases) {
    if (c.vocab_begin != 0 || c.vocab_local != c.vocab_total) continue;
    SCOPED_TRACE(::testing::Message() << c.rows << "x" << c.vocab_local);
    const Tensor wide = random({c.rows, c.vocab_local}, 16, -8.0f, 8.0f);
    Tensor logits = Tensor::empty(wide.shape(), DType::BF16, Device::cpu());
    for (int64_t i = 0; i < wide.numel(); ++i) logits.bf16()[i] = fp32_to_bf16(wide.f32()[i]);
    const Tensor targets = random_ids(c.rows, c.vocab_total, 17), dloss = random({c.rows}, 18, 0.1f, 1.0f);
    Tensor gpu = to_device(logits);
    auto row = [&] { return Tensor::empty({c.rows}, DType::F32, kGpu); };
    Tensor gmax = row(), gsum = row(), gtl = row(), glse = row();
    kernels::cross_entropy_fused(gpu, to_device(targets), to_device(dloss), gmax, gsum, gtl, glse);
    Tensor cpu = logits.clone(), hmax = Tensor::empty({c.rows}, DType::F32, Device::cpu());
    Tensor hsum = hmax.clone(), htl = hmax.clone(), hlse = hmax.clone();
    kernels::cross_entropy_fused(cpu, targets, dloss, hmax, hsum, htl, hlse);
    const Tensor got = to_host(gpu);
    Tensor got32 = Tensor::empty(wide.shape(), DType::F32, Device::cpu()), want32 = got32.clone();
    for (int64_t i = 0; i < wide.numel(); ++i) {
      got32.f32()[i] = bf16_to_fp32(got.bf16()[i]);
      want32.f32()[i] = bf16_to_fp32(cpu.bf16()[i]);
    }
    EXPECT_TRUE(same_bits(to_host(gtl), htl));
    EXPECT_TRUE(all_close(to_host(glse), hlse, 1e-6f, 1e-6f));
    EXPECT_TRUE(all_close(got32, want32, 8e-3f, 1e-12f));
  }
}

// The per-row combination after the group's reductions: expf/logf on the GPU, std::exp/log on the CPU
// (a few ulps apart); the loss sum in double, the same on repeated calls.
TEST_F(CudaCrossEntropy, VocabParallelCombinationMatchesTheCpu) {
  for (int64_t rows : {1, 7, 300, 8193}) {
    SCOPED_TRACE(rows);
    const Tensor max = random({rows}, 8, -2.0f, 6.0f), global_max = random({rows}, 9, 6.0f, 8.0f);
    const Tensor target = random({rows}, 10, -3.0f, 3.0f), mask = random({rows}, 11, 0.0f, 1.0f);
    Tensor sumexp = random({rows}, 12, 1.0f, 500.0f), sumexp_gpu = to_device(sumexp);
    kernels::rescale_sum_exp(sumexp_gpu, to_device(max), to_device(global_max));
    kernels::rescale_sum_exp(sumexp, max, global_max);
    EXPECT_TRUE(all_close(to_host(sumexp_gpu), sumexp, 1e-6f, 0.0f));
    Tensor lse = Tensor::empty({rows}), lse_gpu = to_device(lse);
    const Tensor max_gpu = to_device(max), target_gpu = to_device(target), mask_gpu = to_device(mask);
    const double gpu = kernels::masked_loss_sum(max_gpu, sumexp_gpu, target_gpu, mask_gpu, lse_gpu);
    const double cpu = kernels::masked_loss_sum(max, sumexp, target, mask, lse);
    EXPECT_TRUE(all_close(to_host(lse_gpu), lse, 1e-6f, 1e-6f));
    EXPECT_NEAR(gpu, cpu, 1e-5 * (1.0 + std::fabs(cpu)));
    EXPECT_EQ(kernels::masked_loss_sum(max_gpu, sumexp_gpu, target_gpu, mask_gpu, lse_gpu), gpu);
  }
}

// A loss total kept on the device across micro-batches (the trainer's step): nothing is read back until
// loss_total_value, and the total is the sums masked_loss_sum copies back added in double in the same
// order, bit for bit; the CPU's total within the same tolerance as its sums.
TEST_F(CudaCrossEntropy, ALossTotalOnTheDeviceHoldsTheReturnedSumsAddedInOrder) {
  const int64_t rows = 8193;
  const Tensor max = random({rows}, 8, -2.0f, 6.0f), sumexp = random({rows}, 12, 1.0f, 500.0f);
  const Tensor target = random({rows}, 10, -3.0f, 3.0f);
  const Tensor max_gpu = to_device(max), sumexp_gpu = to_device(sumexp), target_gpu = to_device(target);
  Tensor lse = Tensor::empty({rows}, DType::F32, Device::cpu());
  const Tensor lse_gpu = to_device(lse), lse_returned = to_device(lse);
  const Tensor total = kernels::loss_total(kGpu), cpu_total = kernels::loss_total(Device::cpu());
  double returned = 0;
  for (uint64_t m = 0; m < 3; ++m) {
    const Tensor mask = random({rows}, 20 + m, 0.0f, 1.0f), mask_gpu = to_device(mask);
    kernels::masked_loss_sum_into(max_gpu, sumexp_gpu, target_gpu, mask_gpu, lse_gpu, total);
    returned += kernels::masked_loss_sum(max_gpu, sumexp_gpu, target_gpu, mask_gpu, lse_returned);
    kernels::masked_loss_sum_into(max, sumexp, target, mask, lse, cpu_total);
  }
  const double got = kernels::loss_total_value(total), cpu = kernels::loss_total_value(cpu_total);
  EXPECT_EQ(got, returned);
  EXPECT_NEAR(got, cpu, 1e-5 * (1.0 + std::fabs(cpu)));
  EXPECT_TRUE(same_bits(to_host(lse_gpu), to_host(lse_returned)));
  EXPECT_TRUE(all_close(to_host(lse_gpu), lse, 1e-6f, 1e-6f));
}

}  // namespace
}  // namespace tessera::cuda
