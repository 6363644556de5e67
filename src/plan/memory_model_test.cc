// The memory model against Korthikanti et al.'s formulas and Megatron's bytes per parameter; the
// collective costs; layout rules; the Chinchilla optimum.
#include "plan/memory_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/check.h"
#include "plan/chinchilla.h"
#include "plan/planner.h"

namespace tessera::plan {
namespace {

model::ModelConfig gpt(int64_t layers, int64_t hidden, int64_t heads, int64_t seq) {
  model::ModelConfig c;
  c.num_layers = layers;
  c.hidden_size = hidden;
  c.num_attention_heads = heads;
  c.num_query_groups = heads;
  c.kv_channels = hidden / heads;
  c.ffn_hidden_size = 4 * hidden;
  c.seq_length = seq;
  c.max_position_embeddings = seq;
  c.vocab_size = c.padded_vocab_size = 51200;
  return c;
}

TEST(MemoryModel, LayerActivationsAreKorthikantisFormulas) {
  const model::ModelConfig c = gpt(96, 12288, 96, 2048);  // GPT-3 175B, the paper's Table 2 model
  const double s = 2048, b = 1, h = 12288, a = 96;
  for (int t : {1, 2, 8}) {
    Layout l;
    l.tp = t;
    l.micro_batch_size = 1;
    l.precision = Precision::Bf16;
    EXPECT_NEAR(layer_activation_bytes(c, l, 1), s * b * h * (10 + 24.0 / t + 5 * a * s / (h * t)), 1) << "t=" << t;
    l.sequence_parallel = true;
    EXPECT_NEAR(layer_activation_bytes(c, l, 1), s * b * h * (34.0 / t + 5 * a * s / (h * t)), 1) << "t=" << t;
    l.recompute = Recompute::Selective;
    EXPECT_NEAR(layer_activation_bytes(c, l, 1), s * b * h * 34.0 / t, 1) << "t=" << t;
    l.sequence_parallel = false;
    EXPECT_NEAR(layer_activation_bytes(c, l, 1), s * b * h * (10 + 24.0 / t), 1) << "t=" << t;
    l.recompute = Recompute::Full;
    EXPECT_NEAR(layer_input_bytes(c, l), 2 * s * b * h, 1);
  }
}

TEST(MemoryModel, BytesPerParameterAreMegatrons) {
  const model::ModelConfig c = gpt(24, 1024, 16, 1024);
  Layout l;
  l.dp = 4;
  l.global_batch_size = 4;
  l.precision = Precision::Bf16;
  const DeviceSpec d = find_device("A100-80GB");
  MemoryBreakdown m = stage_memory(c, l, d, 0, 1);
  const double params = static_cast<double>(c.parameter_count());
  EXPECT_DOUBLE_EQ((m.parameters + m.gradients + m.optimizer) / params, 18);  // bf16 + fp32 grads + 12
  l.distributed_optimizer = true;
  m = stage_memory(c, l, d, 0, 1);
  EXPECT_DOUBLE_EQ((m.parameters + m.gradients + m.optimizer) / params, 6 + 12.0 / 4);
  l.precision = Precision::Fp32;
  l.distributed_optimizer = false;
  m = stage_memory(c, l, d, 0, 1);
  EXPECT_DOUBLE_EQ((m.parameters + m.gradients + m.optimizer) / params, 16);
}

TEST(MemoryModel, StagesHoldTheWholeModel) {
  model::ModelConfig c = gpt(8, 512, 8, 128);
  c.untie_embeddings_and_output_weights = true;
  for (int pp : {1, 2, 4}) {
    Layout l;
    l.pp = pp;
    int64_t total = 0;
    for (int r = 0; r < pp; ++r) total += static_cast<int64_t>(stage_parameters(c, l, r).total());
    EXPECT_EQ(total, c.parameter_count()) << "pp=" << pp;
  }
  // Tensor parallelism splits all but the norms and the row-parallel biases.
  Layout l;
  l.tp = 4;
  const double replicated = 8 * (2 * 2 * 512 + 2 * 512) + 2 * 512 + 128 * 512;  // norms, biases, final norm, positions
  EXPECT_NEAR(stage_parameters(c, l, 0).total(),
              (static_cast<double>(c.parameter_count()) - replicated) / 4 + replicated, 1);
}

// --account-for-embedding/loss-in-pipeline-split (Layout::embedding_in_split, loss_in_split): the planner
// prices each stage's own layers, the trainer's split (pipeline::LayerSplit).
TEST(MemoryModel, CountedSplitGivesTheEndStagesALayerFewer) {
  model::ModelConfig c = gpt(6, 512, 8, 128);
  c.untie_embeddings_and_output_weights = true;  // (tied, the last stage holds a copy of the embedding)
  Layout l;
  l.pp = 4;
  l.global_batch_size = 4;
  l.embedding_in_split = l.loss_in_split = true;
  EXPECT_EQ(chunk_layer_numbers(c, l, 0, 0), (std::vector<int64_t>{1}));
  EXPECT_EQ(chunk_layer_numbers(c, l, 1, 0), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(chunk_layer_numbers(c, l, 2, 0), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(chunk_layer_numbers(c, l, 3, 0), (std::vector<int64_t>{6}));
  int64_t total = 0;
  for (int r = 0; r < 4; ++r) total += static_cast<int64_t>(stage_parameters(c, l, r).total());
  EXPECT_EQ(total, c.parameter_count());
  EXPECT_EQ(layout_problem(c, l, 4), "");
  l.loss_in_split = false;  // 6 + 1 = 7 layers over 4 stages
  std::string family;
  EXPECT_EQ(layout_problem(c, l, 4, &family),
            "--num-layers=6 (7 with the embedding and/or the loss counted) does not split over pp 4 x v 1 model chunks");
  EXPECT_EQ(family, "divisibility");
  l.loss_in_split = true;
  l.pp = 2;
  l.dp = 2;
  l.virtual_stages = 2;
  l.zero_bubble = pipeline::ZeroBubble::V;
  EXPECT_NE(layout_problem(c, l, 4).find("cannot be combined with ZB-V"), std::string::npos);
}

TEST(MemoryModel, PipelineMemoryUsesTheSchedulesInFlightMicroBatches) {
  const model::ModelConfig c = gpt(16, 1024, 16, 1024);
  Layout l;
  l.pp = 4;
  l.global_batch_size = 16;
  const DeviceSpec d = find_device("A100-80GB");
  Plan p = make_plan(c, l, {d, 4}, {});
  // 1F1B: stage r holds min(p - r, m) micro-batches of its 4 layers.
  for (int r = 0; r < 4; ++r) EXPECT_EQ(p.memory[r].in_flight, 4 - r);
  // ... plus one layer of backward working memory.
  EXPECT_NEAR(p.memory[1].activations, (3 * 4 + 1) * layer_activation_bytes(c, l, 1), 1);
  EXPECT_EQ(p.peak_memory_stage, 0);
}

// A small MoE GPT without biases: every layer's experts are plain 2 h f weights.
model::ModelConfig moe_gpt(std::vector<int64_t> layer_experts, int64_t moe_ffn) {
  model::ModelConfig c = gpt(static_cast<int64_t>(layer_experts.size()), 64, 4, 32);
  c.add_bias_linear = false;
  c.moe.layer_experts = std::move(layer_experts);
  c.moe.ffn_hidden_size = moe_ffn;
  c.moe.router.topk = 2;
  return c;
}

TEST(MoeMemory, ExpertParametersPerRankAndTheirShardedOptimizerState) {
  const model::ModelConfig c = moe_gpt({8, 8, 8, 8}, 128);
  const double expert = 2 * 64 * 128, all_experts = 4 * 8 * expert;  // one expert; every expert of the model
  const double dense = static_cast<double>(c.parameter_count()) - all_experts;
  const DeviceSpec d = find_device("A100-80GB");
  for (int ep : {1, 2, 4})
    for (int etp : {1, 2}) {
      SCOPED_TRACE(str_cat("ep ", ep, " etp ", etp));
      Layout l;
      l.dp = 8;
      l.ep = ep;
      l.etp = etp;
      l.global_batch_size = 8;
      l.distributed_optimizer = true;
      ASSERT_EQ(layout_problem(c, l, 8), "");
      EXPECT_EQ(l.edp(), 8 / (ep * etp));
      // Each rank holds 8 / ep experts of each of the 4 layers, each expert split over etp.
      const RankParameters p = stage_parameters(c, l, 0);
      EXPECT_DOUBLE_EQ(p.expert, 4 * (8.0 / ep) * expert / etp);
      EXPECT_DOUBLE_EQ(p.dense, dense);
      // bf16 weights and fp32 gradients of everything held; the 12 bytes of Adam state sharded over dp
      // for dense parameters, over edp for expert ones.
      const MemoryBreakdown m = stage_memory(c, l, d, 0, 1);
      EXPECT_DOUBLE_EQ(m.parameters + m.gradients, 6 * (dense + p.expert));
      EXPECT_DOUBLE_EQ(m.optimizer, 12 * dense / 8 + 12 * p.expert / l.edp());
      l.distributed_optimizer = false;
      EXPECT_DOUBLE_EQ(stage_memory(c, l, d, 0, 1).optimizer, 12 * (dense + p.expert));
    }
}

TEST(MoeMemory, RanksHoldTheWholeModel) {
  // A pyramid with dense layers between, a shared expert, and the residual form.
  for (bool residual : {false, true}) {
    model::ModelConfig c = moe_gpt({0, 4, 0, 8}, 96);
    c.moe.shared_expert_intermediate_size = 32;
    c.moe.residual = residual;
    c.untie_embeddings_and_output_weights = true;
    for (int pp : {1, 2})
      for (int ep : {1, 2, 4})
        for (int etp : {1, 2}) {
          Layout l;
          l.pp = pp;
          l.dp = 16 / pp;
          l.ep = ep;
          l.etp = etp;
          l.global_batch_size = 16;
          ASSERT_EQ(layout_problem(c, l, 16), "") << describe(l);
          // The dense parameters of a stage are on every one of its ranks (tp 1); its experts are split
          // into ep x etp disjoint pieces (no biases to replicate).
          double total = 0;
          for (int r = 0; r < pp; ++r) {
            const RankParameters p = stage_parameters(c, l, r);
            total += p.dense + p.expert * ep * etp;
          }
          EXPECT_EQ(total, static_cast<double>(c.parameter_count())) << describe(l) << (residual ? " residual" : "");
        }
  }
}

TEST(MoeMemory, OneExpertOfTopOneIsTheDenseMlpPlusTheRouting) {
  // Routed through one expert of the MLP's width, every token's row is kept twice more (the expert's
  // input and its output) beside the router's logits, probabilities, indices and the rows' bookkeeping.
  model::ModelConfig dense = gpt(2, 64, 4, 32);
  model::ModelConfig c = dense;
  c.moe.layer_experts = {1, 0};
  c.moe.ffn_hidden_size = c.ffn_hidden_size;
  c.moe.router.topk = 1;
  Layout l;
  l.micro_batch_size = 2;
  const double tokens = 32 * 2, e = 2;
  EXPECT_DOUBLE_EQ(routed_rows(c, l, 1), tokens);
  EXPECT_EQ(routed_rows(c, l, 2), 0);
  EXPECT_DOUBLE_EQ(layer_activation_bytes(c, l, 1) - layer_activation_bytes(dense, l, 1),
                   tokens * (4 + 8 + 12) + 2 * tokens * 64 * e);
  EXPECT_DOUBLE_EQ(layer_activation_bytes(c, l, 2), layer_activation_bytes(dense, l, 2));
  // Under tp 2 with sequence parallelism a rank routes its half of the tokens (etp 1 and ep 1 here).
  l.tp = 2;
  l.etp = 1;
  l.sequence_parallel = true;
  EXPECT_DOUBLE_EQ(routed_rows(c, l, 1), tokens / 2);
  // A capacity factor below 1 drops rows; padding to capacity keeps exactly E x capacity of them.
  c.moe.router.topk = 1;
  c.moe.layer_experts = {4, 0};
  c.moe.capacity_factor = 0.5;
  EXPECT_DOUBLE_EQ(routed_rows(c, l, 1), 4 * std::ceil(tokens / 2 / 4 * 0.5));
  c.moe.capacity_factor = 2;
  EXPECT_DOUBLE_EQ(routed_rows(c, l, 1), tokens / 2);
  c.moe.pad_expert_input_to_capacity = true;
  EXPECT_DOUBLE_EQ(routed_rows(c, l, 1), 4 * std::ceil(tokens / 2 / 4 * 2));
}

// Context parallelism (issue 37): each rank keeps the activations of its seq / cp tokens, plus the ring's
// four key/value-sized buffers; dense optimizer state is sharded over dp x cp.
TEST(ContextParallelMemory, ActivationsPerRankShrinkByCpAndTheRingAddsItsBuffers) {
  model::ModelConfig c = gpt(8, 1024, 16, 8192);
  c.num_query_groups = 4;  // grouped-query attention: K and V are a quarter of Q
  Layout one;
  one.tp = 2;
  one.sequence_parallel = true;
  one.dp = 2;
  one.global_batch_size = 2;
  one.flash_attention = true;
  Layout two = one;
  two.cp = 2;
  two.dp = 1;
  const DeviceSpec d = find_device("A100-80GB");
  EXPECT_EQ(layout_problem(c, two, 4), "");
  EXPECT_DOUBLE_EQ(layer_activation_bytes(c, two, 1), layer_activation_bytes(c, one, 1) / 2);
  const MemoryBreakdown m1 = stage_memory(c, one, d, 0, 1), m2 = stage_memory(c, two, d, 0, 1);
  EXPECT_DOUBLE_EQ(m2.activations, m1.activations / 2);  // the layers, the embedding's output, the logits
  const double kv_bytes = 2.0 * 4 * 64 / 2 * 2;  // K and V per token on one tensor rank, bf16
  EXPECT_DOUBLE_EQ(ring_buffer_bytes(c, two), 4 * 4096 * kv_bytes);
  EXPECT_DOUBLE_EQ(m2.communication - m1.communication / 2, ring_buffer_bytes(c, two));  // sp's gather halves
  EXPECT_EQ(ring_buffer_bytes(c, one), 0);
  EXPECT_DOUBLE_EQ(m2.parameters + m2.gradients + m2.optimizer, m1.parameters + m1.gradients + m1.optimizer);
  one.distributed_optimizer = two.distributed_optimizer = true;  // sharded over dp 2, and over dp 1 x cp 2
  EXPECT_DOUBLE_EQ(stage_memory(c, two, d, 0, 1).optimizer, stage_memory(c, one, d, 0, 1).optimizer);
  // Without flash attention a cp 1 layer keeps the s x s scores; the ring is the flash kernel's blocks.
  one.flash_attention = two.flash_attention = false;
  EXPECT_GT(layer_activation_bytes(c, one, 1), 4 * layer_activation_bytes(c, two, 1));
  // The trainer's rules: 2 cp chunks, and under sequence parallelism seq / cp divisible by tp.
  two.cp = 3;
  two.dp = 1;
  two.tp = 1;
  two.sequence_parallel = false;
  std::string family;
  EXPECT_NE(layout_problem(c, two, 3, &family).find("2 x cp 3"), std::string::npos);
  EXPECT_EQ(family, "divisibility");
  c.seq_length = 8196;  // 2 x cp 2 chunks, but 4098 tokens per rank are not divisible by tp 4
  two.cp = 2;
  two.tp = 4;
  two.sequence_parallel = true;
  EXPECT_NE(layout_problem(c, two, 8).find("with --sequence-parallel"), std::string::npos);
}

TEST(Cluster, CollectiveCostsAndWhichLinksAGroupUses) {
  const DeviceSpec d = find_device("A100-80GB");
  // A tensor group of 8 stays in the node; its all-reduce is the ring's 2 (n-1)/n bytes over NVLink.
  EXPECT_NEAR(all_reduce_seconds(d, 1e9, 8, 1), 2.0 * 7 / 8 * 1e9 / d.intra_node_bandwidth + 14 * d.intra_node_latency, 1e-12);
  EXPECT_FALSE(group_links(d, 8, 1).crosses_nodes);
  // A data-parallel group at stride 8 has one member per node: each uses its own NIC.
  GroupLinks across = group_links(d, 64, 8);
  EXPECT_TRUE(across.crosses_nodes);
  EXPECT_DOUBLE_EQ(across.bandwidth, d.inter_node_bandwidth);
  // At stride 1 over 4 nodes, the 8 members of a node share the node's 8 NICs.
  EXPECT_DOUBLE_EQ(group_links(d, 32, 1).bandwidth, std::min(d.intra_node_bandwidth, 8 * d.inter_node_bandwidth));
  EXPECT_EQ(all_reduce_seconds(d, 1e9, 1, 1), 0);
  EXPECT_THROW(find_device("TPU"), Error);
}

TEST(Cluster, JsonRoundTripAndOverrides) {
  DeviceSpec d = find_device("H100-SXM");
  d.gemm_rates.push_back({2048, 3072, 1024, 1.5e14});
  DeviceSpec back = device_from_json(to_json(d));
  EXPECT_EQ(back.name, d.name);
  EXPECT_DOUBLE_EQ(back.peak_flops, d.peak_flops);
  EXPECT_DOUBLE_EQ(back.inter_node_bandwidth, d.inter_node_bandwidth);
  ASSERT_EQ(back.gemm_rates.size(), 1u);
  EXPECT_DOUBLE_EQ(back.gemm_rates[0].flops_per_second, 1.5e14);
  DeviceSpec slower = device_from_json({{"base", "A100-80GB"}, {"inter_node_bandwidth", 12.5e9}});
  EXPECT_DOUBLE_EQ(slower.inter_node_bandwidth, 12.5e9);
  EXPECT_DOUBLE_EQ(slower.peak_flops, find_device("A100-80GB").peak_flops);
  EXPECT_THROW(device_from_json({{"peak_flops", 1e12}}), Error);  // no base and missing fields
  EXPECT_THROW(device_from_json({{"base", "A100-80GB"}, {"memory_bytes", -1}}), Error);
}

TEST(Layout, ProblemsNameTheRuleAndFamily) {
  const model::ModelConfig c = gpt(12, 768, 12, 1024);
  Layout l;
  l.tp = 8;
  l.dp = 1;
  l.global_batch_size = 8;
  std::string family;
  EXPECT_NE(layout_problem(c, l, 8, &family).find("--num-attention-heads=12"), std::string::npos);
  EXPECT_EQ(family, "divisibility");
  l.tp = 2;
  l.pp = 4;
  l.micro_batch_size = 2;
  l.global_batch_size = 3;
  EXPECT_NE(layout_problem(c, l, 8, &family).find("--global-batch-size=3"), std::string::npos);
  EXPECT_EQ(family, "batch");
  l.global_batch_size = 6;
  l.virtual_stages = 3;
  EXPECT_NE(layout_problem(c, l, 8, &family).find("multiple of pp 4"), std::string::npos);
  l.global_batch_size = 8;
  EXPECT_EQ(layout_problem(c, l, 8), "");
  EXPECT_THROW(make_plan(c, l, {find_device("A100-80GB"), 16}, {}), Error);  // 8 ranks of 16 devices
}

TEST(Layout, ExpertParallelRulesAreTheTrainers) {
  model::ModelConfig c = gpt(4, 256, 8, 128);
  c.moe.layer_experts = {6, 6, 12, 12};
  c.moe.ffn_hidden_size = 90;
  c.moe.router.topk = 2;
  Layout l;
  l.dp = 8;
  l.global_batch_size = 8;
  std::string family;
  l.ep = 4;  // 6 experts do not split over 4 ranks
  EXPECT_NE(layout_problem(c, l, 8, &family).find("--num-experts=6 is not divisible by ep 4"), std::string::npos);
  EXPECT_EQ(family, "experts");
  l.ep = 3;
  EXPECT_NE(layout_problem(c, l, 8).find("does not divide the 8 devices"), std::string::npos);
  l.ep = 2;
  l.etp = 4;
  EXPECT_NE(layout_problem(c, l, 8).find("--moe-ffn-hidden-size=90 is not divisible by etp 4"), std::string::npos);
  l.etp = 2;
  EXPECT_EQ(layout_problem(c, l, 8), "");
  l.tp = 2;
  l.dp = 4;
  EXPECT_NE(layout_problem(c, l, 8).find("needs --sequence-parallel"), std::string::npos);
  l.sequence_parallel = true;
  EXPECT_EQ(layout_problem(c, l, 8), "");
  EXPECT_EQ(describe(l), "tp2 pp1 dp4 ep2 etp2 v1 mbs1 gbs8 sp recompute=none");
  c.moe.layer_experts.clear();  // a dense model has no experts to split
  EXPECT_NE(layout_problem(c, l, 8, &family).find("needs --num-experts"), std::string::npos);
  l.ep = 1;
  l.etp = 0;
  EXPECT_EQ(layout_problem(c, l, 8), "");
  EXPECT_EQ(describe(l), "tp2 pp1 dp4 v1 mbs1 gbs8 sp recompute=none");
}

TEST(Chinchilla, OptimumMinimisesTheLossOnTheBudget) {
  for (double budget : {1e20, 5.76e23, 1e25}) {
    const ComputeOptimal o = compute_optimal(budget);
    EXPECT_NEAR(6 * o.parameters * o.tokens / budget, 1, 1e-12);
    // Any other split of the same budget has a higher loss.
    for (double scale : {0.8, 0.95, 1.05, 1.25}) {
      const double n = o.parameters * scale;
      EXPECT_GT(chinchilla_loss(n, budget / (6 * n)), o.loss) << budget << " x" << scale;
    }
  }
  // Chinchilla's own budget (5.76e23 FLOPs): approach 3 puts the optimum at tens of billions of
  // parameters trained on about a trillion tokens.
  const ComputeOptimal chinchilla = compute_optimal(5.76e23);
  EXPECT_GT(chinchilla.parameters, 20e9);
  EXPECT_LT(chinchilla.parameters, 50e9);
  const model::ModelConfig shaped = shape_for_parameters(chinchilla.parameters, gpt(1, 128, 1, 2048));
  EXPECT_NEAR(12.0 * shaped.num_layers * shaped.hidden_size * shaped.hidden_size / chinchilla.parameters, 1, 0.1);
  EXPECT_EQ(shaped.hidden_size % 128, 0);
}

}  // namespace
}  // namespace tessera::plan
