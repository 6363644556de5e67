// What every step's forwards and backwards are given (train/step_context.h): the loss tokens, the
// gradient scale and mean loss over them, and each micro-batch's ForwardContext.
#include "train/step_context.h"

#include <gtest/gtest.h>

namespace tessera::train {
namespace {

model::MicroBatch masked(const std::vector<float>& mask) {
  model::MicroBatch b;
  b.loss_mask = Tensor::empty({1, static_cast<int64_t>(mask.size())}, DType::F32, Device::cpu());
  std::copy(mask.begin(), mask.end(), b.loss_mask.host_f32());
  return b;
}

TEST(StepContext, LossTokensAreTheLossMasksSum) {
  const std::vector<model::MicroBatch> batches{masked({1, 0, 1, 1}), masked({0, 0, 1, 0})};
  EXPECT_EQ(loss_tokens(batches[0]), 3.0);
  EXPECT_EQ(loss_tokens(batches), 4.0);
  EXPECT_EQ(loss_tokens(std::vector<model::MicroBatch>{masked({0, 0})}), 0.0);
}

TEST(StepContext, TheObjectiveIsTheMeanOverTheNormaliser) {
  EXPECT_EQ(gradient_scale(8), 0.125f);
  EXPECT_EQ(gradient_scale(3), static_cast<float>(1.0 / 3));
  EXPECT_EQ(mean_loss(6, 4), 1.5);
  // Nothing to average over: no gradient and no loss, rather than infinities.
  EXPECT_EQ(gradient_scale(0), 0.0f);
  EXPECT_EQ(mean_loss(0, 0), 0.0);
  EXPECT_EQ(per_sample_loss_weight(96, 8), 12.0);
}

TEST(StepContext, TrainingKeysDropoutByTheIterationBeingRunEvaluationByTheWeights) {
  const model::ForwardContext train = micro_batch_context(7, 41, true, 96, 64, 4, 2.5);
  EXPECT_EQ(train.seed, 7u);
  EXPECT_EQ(train.iteration, 42);  // the 42nd iteration (Megatron counts from 1), after 41 completed
  EXPECT_TRUE(train.training);
  EXPECT_EQ(train.sample_offset, 96);
  EXPECT_EQ(train.seq, 64);
  EXPECT_EQ(train.batch, 4);
  EXPECT_EQ(train.per_sample_loss_weight, 2.5);
  const model::ForwardContext eval = micro_batch_context(7, 41, false, 0, 64, 4);
  EXPECT_EQ(eval.iteration, 41);
  EXPECT_FALSE(eval.training);
  EXPECT_EQ(eval.per_sample_loss_weight, 1.0);
}

}  // namespace
}  // namespace tessera::train
