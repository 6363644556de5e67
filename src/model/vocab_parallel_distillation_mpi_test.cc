// The vocab-parallel KD term (VocabParallelDistillation) at every tensor-parallel size of the world:
// each rank holding its vocabulary shard of the student's and the teacher's logits gives the
// single-process value of β·τ²·KL (itself float64's, at np 1 too) and, in its shard, the single-process
// dlogits of α·CE + β·τ²·KL.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "comm/mpi_test_main.h"
#include "comm/parallel_state.h"
#include "core/testing.h"
#include "model/lm_head.h"
#include "model/vocab_parallel_distillation.h"

namespace tessera::model {
namespace {

constexpr int64_t kRows = 12, kVocab = 96;

// Columns [begin, begin + local) of the [rows, vocab] values.
Tensor columns(const std::vector<float>& full, int64_t begin, int64_t local) {
  Tensor t = Tensor::empty({kRows, local});
  for (int64_t r = 0; r < kRows; ++r) std::memcpy(t.f32() + r * local, full.data() + r * kVocab + begin, local * 4);
  return t;
}

const std::vector<float>& student_values() {
  static const std::vector<float> v = testing::random_vector(kRows * kVocab, 1, -4.0f, 4.0f);
  return v;
}
const std::vector<float>& teacher_values() {
  static const std::vector<float> v = testing::random_vector(kRows * kVocab, 2, -4.0f, 4.0f);
  return v;
}
float mask_of(int64_t row) { return row % 5 == 0 ? 0.0f : 1.0f; }

// β·τ²·sum_r mask_r KL_r in float64, straight from the definition.
double reference_kd(const DistillationWeights& w) {
  const std::vector<float>& s = student_values();
  const std::vector<float>& t = teacher_values();
  const double tau = w.temperature;
  double total = 0;
  for (int64_t r = 0; r < kRows; ++r) {
    double ms = -INFINITY, mt = -INFINITY, zs = 0, zt = 0;
    for (int64_t j = 0; j < kVocab; ++j) {
      ms = std::max(ms, s[r * kVocab + j] / tau);
      mt = std::max(mt, t[r * kVocab + j] / tau);
    }
    for (int64_t j = 0; j < kVocab; ++j) {
      zs += std::exp(s[r * kVocab + j] / tau - ms);
      zt += std::exp(t[r * kVocab + j] / tau - mt);
    }
    double kl = 0;
    for (int64_t j = 0; j < kVocab; ++j) {
      const double log_pt = t[r * kVocab + j] / tau - mt - std::log(zt);
      const double log_ps = s[r * kVocab + j] / tau - ms - std::log(zs);
      kl += std::exp(log_pt) * (log_pt - log_ps);
    }
    total += mask_of(r) * kl;
  }
  return w.beta * tau * tau * total;
}

struct Result {
  double ce = 0, kd = 0;
  Tensor dlogits;  // this rank's shard
};

// The head's losses and backward on this rank's shard of the vocabulary.
Result run(const parallel::TensorParallelContext& tp, const DistillationWeights& w) {
  const std::vector<float>& s = student_values();
  const std::vector<float>& t = teacher_values();
  const int64_t local = kVocab / tp.size(), begin = tp.rank() * local;
  Tensor labels = Tensor::empty({kRows}, DType::I32), mask = Tensor::empty({kRows});
  for (int64_t r = 0; r < kRows; ++r) {
    labels.i32()[r] = static_cast<int32_t>((13 * r + 5) % kVocab);  // on every shard in turn
    mask.f32()[r] = mask_of(r);
  }
  Tensor logits = columns(s, begin, local), teacher = columns(t, begin, local), lse, kd_lse;
  Result out;
  out.ce = VocabParallelCrossEntropy(tp, begin, local).forward(logits, labels, mask, lse);
  const VocabParallelDistillation kd(tp, begin);
  out.kd = kd.forward(logits, teacher, mask, w, kd_lse);
  kd.backward(logits, teacher, labels, lse, kd_lse, mask, 0.125f, w, DType::F32);
  out.dlogits = logits;
  return out;
}

TEST(VocabParallelDistillation, EveryTensorParallelSizeMatchesOneRank) {
  auto world = comm::make_mpi_world_group();
  const int n = world->size();
  int layouts = 0;
  for (const DistillationWeights w : {DistillationWeights{1, 1, 1}, DistillationWeights{0.3f, 2.0f, 2.5f}}) {
    SCOPED_TRACE(str_cat("alpha=", w.alpha, " beta=", w.beta, " temperature=", w.temperature));
    const Result one = run(parallel::TensorParallelContext::single_process(), w);
    const double want = reference_kd(w);  // the τ² and β scaling of the KL, checked against its definition
    EXPECT_NEAR(one.kd, want, 1e-5 * want);
    for (int tp : {2, 4, 8}) {
      if (n % tp != 0 || kVocab % tp != 0) continue;
      SCOPED_TRACE(str_cat("tp=", tp));
      comm::ParallelState state(*world, {n, tp, 1});
      const parallel::TensorParallelContext ctx{&state.tensor_group(), false, nullptr};
      const Result r = run(ctx, w);
      EXPECT_NEAR(r.ce, one.ce, 1e-5 * one.ce);
      EXPECT_NEAR(r.kd, one.kd, 1e-5 * one.kd);
      const int64_t local = kVocab / tp, begin = ctx.rank() * local;
      for (int64_t row = 0; row < kRows; ++row)
        for (int64_t j = 0; j < local; ++j)
          EXPECT_NEAR(r.dlogits.f32()[row * local + j], one.dlogits.f32()[row * kVocab + begin + j], 1e-7)
              << "row " << row << " id " << begin + j;
      ++layouts;
    }
  }
  if (layouts == 0) GTEST_SKIP() << "no tensor-parallel size above 1 divides " << n << " rank(s)";
}

}  // namespace
}  // namespace tessera::model
