// The planner's Ouroboros price (plan/ouroboros.h) against the module costs it is made of: the forward
// chain, every rank's backward at once, and the copies the delays keep.
#include "plan/ouroboros.h"

#include <gtest/gtest.h>

#include "core/check.h"
#include "plan/memory_model.h"
#include "plan/time_model.h"

namespace tessera::plan {
namespace {

model::ModelConfig gpt(int64_t layers) {
  model::ModelConfig c;
  c.num_layers = layers;
  c.hidden_size = 512;
  c.num_attention_heads = 8;
  c.num_query_groups = 8;
  c.kv_channels = 64;
  c.ffn_hidden_size = 2048;
  c.seq_length = 256;
  c.max_position_embeddings = 256;
  c.vocab_size = c.padded_vocab_size = 8192;
  return c;
}

TEST(OuroborosPlan, ForwardChainThenEveryRankBackwardAtOnce) {
  const model::ModelConfig c = gpt(6);
  Layout l;
  l.pp = 2;  // K = 3 modules of 2 layers
  l.micro_batch_size = 2;
  l.global_batch_size = 8;  // m = 4
  const DeviceSpec d = find_device("A100-80GB");
  const OuroborosPlan p = plan_ouroboros(c, l, d);
  ASSERT_EQ(p.modules, 3);
  Layout split = l;
  split.pp = 3;
  const PipelineCosts costs = pipeline_costs(c, split, d);
  double chain = 2 * 4 * (costs.p2p_transfer + costs.p2p_local);
  for (int k = 0; k < 3; ++k) {
    EXPECT_DOUBLE_EQ(p.module_forward[k], 4 * (costs.forward_compute[k][0] + costs.forward_comm[k][0]));
    chain += p.module_forward[k];
  }
  EXPECT_NEAR(p.forward_chain, chain, 1e-12);
  // Rank 0 holds modules 0 and 2 (the embedding's two ends), rank 1 module 1.
  EXPECT_DOUBLE_EQ(p.rank_backward[0], p.module_backward[0] + p.module_backward[2]);
  EXPECT_DOUBLE_EQ(p.rank_backward[1], p.module_backward[1]);
  const double slowest = std::max(p.rank_backward[0] + p.rank_optimizer[0], p.rank_backward[1] + p.rank_optimizer[1]);
  EXPECT_NEAR(p.iteration, p.forward_chain + p.error_gradients + slowest, 1e-12);
  // Backward unlocked: shorter than running the backwards one after another, as plain model parallelism does.
  EXPECT_LT(p.iteration, p.forward_chain + p.error_gradients + p.rank_backward[0] + p.rank_backward[1] +
                             p.rank_optimizer[0] + p.rank_optimizer[1]);
  for (int r = 0; r < 2; ++r) EXPECT_GE(p.rank_idle[r], 0);
}

TEST(OuroborosPlan, ModuleKKeepsKMinusOneMinusKWeightVersionsAndMiniBatches) {
  const model::ModelConfig c = gpt(8);
  Layout l;
  l.pp = 3;  // K = 4 modules of 2 layers: delays 3, 2, 1, 0
  l.micro_batch_size = 1;
  l.global_batch_size = 2;
  const OuroborosPlan p = plan_ouroboros(c, l, find_device("A100-80GB"));
  Layout split = l;
  split.pp = 4;
  auto activations = [&](int k) {
    double bytes = 0;
    for (int64_t layer : chunk_layer_numbers(c, split, k, 0)) bytes += layer_activation_bytes(c, split, layer);
    return bytes;
  };
  // Rank 0: module 0 (delay 3) and module 3 (delay 0); ranks 1 and 2: modules 1 and 2.
  EXPECT_DOUBLE_EQ(p.weight_copy_bytes[0], 3 * stage_parameters(c, split, 0).total() * 4);
  EXPECT_DOUBLE_EQ(p.weight_copy_bytes[1], 2 * stage_parameters(c, split, 1).total() * 4);
  EXPECT_DOUBLE_EQ(p.weight_copy_bytes[2], 1 * stage_parameters(c, split, 2).total() * 4);
  EXPECT_DOUBLE_EQ(p.activation_copy_bytes[0], 3 * 2 * activations(0));
  EXPECT_DOUBLE_EQ(p.activation_copy_bytes[2], 1 * 2 * activations(2));
}

TEST(OuroborosPlan, LayersThatDoNotSplitIntoKModulesAreAnError) {
  Layout l;
  l.pp = 3;  // K = 4 does not divide 6 layers
  EXPECT_THROW(plan_ouroboros(gpt(6), l, find_device("A100-80GB")), Error);
}

}  // namespace
}  // namespace tessera::plan
