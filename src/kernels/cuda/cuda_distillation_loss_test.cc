// The CUDA distillation loss (kernels/cuda/distillation_loss.cu) through the tensor entry points, on
// tensors on cuda:0, against the CPU kernel on the same random logits: the shard statistics (the maxima
// bit for bit, the sums to fp32 rounding: the GPU adds a row's terms in another order), the KL sum and
// log-sum-exps from the same statistics, the fused backward (fp32 and 16-bit outputs, whole vocabularies
// and shards), and a teacher equal to the student (KL exactly 0, the GPU cross-entropy's gradient bit for
// bit). Skipped, with CUDA's reason, where no GPU is present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "core/tensor.h"
#include "kernels/cross_entropy.h"
#include "kernels/cuda/device_testing.h"
#include "kernels/distillation_loss.h"
#include "kernels/tensor_ops.h"
#include "kernels/vocab_parallel_loss.h"

namespace tessera::cuda {
namespace {

using namespace testing;
using CudaDistillationLoss = CudaKernelTest;

struct Case {
  int64_t rows, vocab_local, vocab_begin;
  int32_t vocab_total;
};
const Case kCases[] = {{1, 1, 0, 1}, {3, 7, 0, 7}, {5, 1031, 1031, 3000}, {16, 4099, 0, 8000}, {4, 50304, 0, 50304}};
const float kTemperatures[] = {1.0f, 0.5f, 2.5f};

// Random student and teacher logits of a case, with a dominant logit in one row of each.
Tensor logits_of(const Case& c, uint64_t seed, int64_t dominant) {
  Tensor x = random({c.rows, c.vocab_local}, seed, -8.0f, 8.0f);
  if (c.rows > 2) x.f32()[dominant * c.vocab_local + c.vocab_local / 3] = 40.0f;
  return x;
}

Tensor host_stats(const Tensor& s, const Tensor& t, float temp) {
  Tensor stats = Tensor::empty({kernels::kDistillationStats, s.dim(0)}, DType::F32, Device::cpu());
  kernels::distillation_shard_stats(s, t, temp, stats);
  return stats;
}

// The rows [first, first + n) of stats [kDistillationStats, rows], as a host tensor.
Tensor stat_rows(const Tensor& stats, int64_t first, int64_t n) { return stats.narrow(first, n).clone(); }

TEST_F(CudaDistillationLoss, ShardStatisticsMatchTheCpu) {
  for (const Case& c : kCases) {
    for (float temp : kTemperatures) {
      SCOPED_TRACE(::testing::Message() << c.rows << "x" << c.vocab_local << " at temperature " << temp);
      const Tensor s = logits_of(c, 1, 1), t = logits_of(c, 2, 2);
      const Tensor want = host_stats(s, t, temp);
      Tensor got = to_device(Tensor::zeros({kernels::kDistillationStats, c.rows}, DType::F32, Device::cpu()));
      kernels::distillation_shard_stats(to_device(s), to_device(t), temp, got);
      const Tensor g = to_host(got);
      // The maxima: exact in any order. The sums: double in another order, then fp32, with exp_approx's
      // FMAs contracted differently; the cross sum cancels (t - s of either sign), so against its scale.
      EXPECT_TRUE(same_bits(stat_rows(g, kernels::kStudentMax, 2), stat_rows(want, kernels::kStudentMax, 2)));
      EXPECT_TRUE(all_close(stat_rows(g, kernels::kStudentSumExp, 2), stat_rows(want, kernels::kStudentSumExp, 2),
                            2e-6f, 0.0f));
      EXPECT_TRUE(all_close(stat_rows(g, kernels::kCrossSum, 1), stat_rows(want, kernels::kCrossSum, 1), 2e-6f,
                            1e-6f * static_cast<float>(c.vocab_local)));
    }
  }
}

TEST_F(CudaDistillationLoss, KlSumMatchesTheCpu) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(::testing::Message() << c.rows << "x" << c.vocab_local);
    const Tensor stats = host_stats(logits_of(c, 3, 0), logits_of(c, 4, 1), 2.0f);
    Tensor mask = random({c.rows}, 5, 0.0f, 1.0f);
    mask.f32()[0] = 0.0f;  // a row outside the loss
    Tensor kd_lse = Tensor::empty({2, c.rows}, DType::F32, Device::cpu());
    const double want = kernels::distillation_kl_sum(stats, mask, kd_lse);
    Tensor kd_lse_gpu = to_device(Tensor::zeros({2, c.rows}, DType::F32, Device::cpu()));
    const double got = kernels::distillation_kl_sum(to_device(stats), to_device(mask), kd_lse_gpu);
    EXPECT_NEAR(got, want, 1e-12 * std::abs(want) + 1e-12);   // double, another order of the rows
    EXPECT_TRUE(all_close(to_host(kd_lse_gpu), kd_lse, 2.4e-7f, 0.0f));  // the GPU's log: within an fp32 ulp
  }
}

TEST_F(CudaDistillationLoss, BackwardMatchesTheCpu) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(::testing::Message() << c.rows << "x" << c.vocab_local << " from " << c.vocab_begin);
    const Tensor s = logits_of(c, 6, 1), t = logits_of(c, 7, 2), targets = random_ids(c.rows, c.vocab_total, 8);
    const Tensor lse = random({c.rows}, 9, 8.0f, 12.0f), dce = random({c.rows}, 10, 0.1f, 1.0f);
    const Tensor dkd = random({c.rows}, 11, 0.1f, 2.0f);
    for (float temp : kTemperatures) {
      // The rows' log-sum-exps at this temperature, as the forward leaves them.
      Tensor kd_lse = Tensor::empty({2, c.rows}, DType::F32, Device::cpu());
      kernels::distillation_kl_sum(host_stats(s, t, temp), Tensor::zeros({c.rows}, DType::F32, Device::cpu()), kd_lse);
      for (DType type : {DType::F32, DType::BF16, DType::F16}) {
        Tensor d = s.clone(), d_gpu = to_device(s);
        kernels::distillation_backward(d_gpu, to_device(t), to_device(targets), to_device(lse), to_device(dce),
                                       to_device(kd_lse), to_device(dkd), temp, c.vocab_begin, type);
        kernels::distillation_backward(d, t, targets, lse, dce, kd_lse, dkd, temp, c.vocab_begin, type);
        // The same formula per element (kernels/math/distillation.h), FMAs contracted differently: an ulp
        // or two in fp32, then a unit of the 16-bit type where that tips its rounding. The cross-entropy's
        // and the KD term's gradients can cancel, so also against the terms' scale (|ce| <= dce < 1,
        // |kd| <= dkd < 2): a few fp32 ulps of 3.
        const float rtol = type == DType::BF16 ? 8e-3f : type == DType::F16 ? 1e-3f : 4e-6f;
        EXPECT_TRUE(all_close(to_host(d_gpu), d, rtol, 2e-6f)) << dtype_name(type) << " at temperature " << temp;
      }
    }
  }
}

// A teacher equal to the student: the same arithmetic on both sides, so the KL is exactly 0 and the fused
// backward is the GPU cross-entropy's backward bit for bit (the KD term adds exactly 0).
TEST_F(CudaDistillationLoss, ATeacherEqualToTheStudentAddsNothing) {
  const Case c{6, 2000, 0, 2000};
  const Tensor s = to_device(logits_of(c, 13, 3)), targets = to_device(random_ids(c.rows, c.vocab_total, 14));
  const Tensor mask = to_device(random({c.rows}, 15, 0.5f, 1.0f));
  Tensor stats = to_device(Tensor::zeros({kernels::kDistillationStats, c.rows}, DType::F32, Device::cpu()));
  Tensor kd_lse = to_device(Tensor::zeros({2, c.rows}, DType::F32, Device::cpu()));
  kernels::distillation_shard_stats(s, s, 1.5f, stats);
  EXPECT_EQ(kernels::distillation_kl_sum(stats, mask, kd_lse), 0.0);
  // The cross-entropy's own log-sum-exp of the rows, as the head keeps it.
  auto rows_on_gpu = [&] { return to_device(Tensor::zeros({c.rows}, DType::F32, Device::cpu())); };
  Tensor mx = rows_on_gpu(), se = rows_on_gpu(), tl = rows_on_gpu(), lse = rows_on_gpu();
  kernels::cross_entropy_shard_stats(s, targets, mx, se, tl, 0);
  kernels::masked_loss_sum(mx, se, tl, mask, lse);
  const Tensor dce = mask, dkd = to_device(random({c.rows}, 16, 0.5f, 2.0f));
  Tensor fused = s.clone(), plain = s.clone();
  kernels::distillation_backward(fused, s, targets, lse, dce, kd_lse, dkd, 1.5f, 0);
  kernels::cross_entropy_backward(plain, targets, lse, dce, 0);
  EXPECT_TRUE(same_bits(to_host(fused), to_host(plain)));
}

}  // namespace
}  // namespace tessera::cuda
