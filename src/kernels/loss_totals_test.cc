// The sums a step keeps on its device (model/language_model.h LossSums): loss totals side by side in one
// tensor read with one copy, and the MoE losses split into the term sum a device writes and the host's
// finishing, which must give the losses' bits. On the CPU here (the kernels' CPU side, which the model's
// test path runs); kernels/cuda/cuda_moe_routing_test.cc checks the GPU's sums against these.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/testing.h"
#include "kernels/moe_routing.h"
#include "kernels/vocab_parallel_loss.h"

namespace tessera::kernels {
namespace {

Tensor random_logits(int64_t tokens, int64_t experts, uint64_t seed) {
  const std::vector<float> v = testing::random_vector(static_cast<size_t>(tokens * experts), seed, -2.0f, 2.0f);
  Tensor t = Tensor::empty({tokens, experts}, DType::F32, Device::cpu());
  std::memcpy(t.raw(), v.data(), t.nbytes());
  return t;
}

double value_of(const Tensor& slot) { return loss_totals_values(slot, 1)[0]; }

TEST(LossTotals, SlotsAreLossTotalsReadInOneCopy) {
  const Tensor totals = loss_totals(3, Device::cpu());
  EXPECT_EQ(loss_totals_values(totals, 3), (std::vector<double>{0.0, 0.0, 0.0}));
  EXPECT_TRUE(loss_totals_values(totals, 0).empty());
  const int64_t rows = 7;
  auto vec = [&](uint64_t seed, float lo, float hi) {
    const std::vector<float> v = testing::random_vector(rows, seed, lo, hi);
    Tensor t = Tensor::empty({rows}, DType::F32, Device::cpu());
    std::memcpy(t.raw(), v.data(), t.nbytes());
    return t;
  };
  const Tensor mx = vec(1, 0, 1), se = vec(2, 1, 3), tg = vec(3, -1, 0), mask = vec(4, 0, 1);
  Tensor lse = Tensor::empty({rows}, DType::F32, Device::cpu());
  masked_loss_sum_into(mx, se, tg, mask, lse, totals.narrow(1, 1));
  masked_loss_sum_into(mx, se, tg, mask, lse, totals.narrow(1, 1));
  const double once = masked_loss_sum(mx, se, tg, mask, lse);
  const std::vector<double> v = loss_totals_values(totals, 3);
  EXPECT_EQ(v[0], 0.0);
  EXPECT_EQ(v[1], 0.0 + once + once);
  EXPECT_EQ(v[2], 0.0);
  EXPECT_EQ(loss_total_value(totals.narrow(1, 1)), v[1]);
  try {
    loss_totals_values(totals, 4);
    ADD_FAILURE() << "4 totals of 3 were read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("loss_totals_values: 4 totals of int64 [3]"), std::string::npos) << e.what();
  }
}

// aux_loss_forward = aux_loss_value(the term sum written to a slot): every score function and grouping.
TEST(LossTotals, AuxLossTermSumFinishedOnTheHostIsTheLoss) {
  const int64_t T = 60, E = 8, k = 2;
  const Tensor logits = random_logits(T, E, 5);
  for (RouterScoreFunction score : {RouterScoreFunction::Softmax, RouterScoreFunction::Sigmoid})
    for (int64_t groups : {int64_t{1}, int64_t{4}}) {
      Tensor counts = Tensor::empty({groups, E}, DType::F32, Device::cpu());
      aux_loss_counts(logits, k, score, groups, counts);
      const int64_t per_group = 2 * T / groups;
      const Tensor slot = loss_totals(1, Device::cpu());
      aux_loss_term_sum_to(logits, counts, k, score, per_group, slot);
      EXPECT_EQ(aux_loss_value(value_of(slot), E, groups, k, per_group, 0.1f),
                aux_loss_forward(logits, counts, k, score, per_group, 0.1f));
    }
}

TEST(LossTotals, ZLossTermSumFinishedOnTheHostIsTheLoss) {
  const Tensor logits = random_logits(60, 8, 6);
  const Tensor slot = loss_totals(1, Device::cpu());
  z_loss_term_sum_to(logits, slot);
  EXPECT_EQ(z_loss_value(value_of(slot), 0.01f, 120), z_loss_forward(logits, 0.01f, 120));
  // No tokens: 0 written over what the slot held.
  z_loss_term_sum_to(Tensor::empty({0, 8}, DType::F32, Device::cpu()), slot);
  EXPECT_EQ(value_of(slot), 0.0);
}

TEST(LossTotals, TermSumsRefuseAnOutputThatIsNotOneDouble) {
  const Tensor logits = random_logits(4, 8, 7);
  try {
    z_loss_term_sum_to(logits, Tensor::zeros({1}, DType::F32, Device::cpu()));
    ADD_FAILURE() << "an fp32 output was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("z_loss_term_sum_to: out is fp32 [1], not one double"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tessera::kernels
