// The planner's zero-bubble pipelines: the simulator runs the ZB-H1 and ZB-V op lists with W priced apart
// from B (the weight-gradient GEMMs), holds activations from F to W, and places ZB-V's output layer on
// rank 0; plans and the search price them against 1F1B and interleaving.
#include <gtest/gtest.h>

#include "pipeline/zero_bubble.h"
#include "plan/memory_model.h"
#include "plan/planner.h"
#include "plan/time_model.h"

namespace tessera::plan {
namespace {

// F = B = W = 1 per (micro-batch, chunk): the costs the training lists are built with.
PipelineCosts unit_costs(int p, int v) {
  PipelineCosts c;
  c.forward_compute.assign(p, std::vector<double>(v, 1));
  c.backward_compute.assign(p, std::vector<double>(v, 2));
  c.backward_weight_compute.assign(p, std::vector<double>(v, 1));
  c.forward_comm = c.backward_comm = std::vector<std::vector<double>>(p, std::vector<double>(v, 0));
  return c;
}

pipeline::ScheduleShape zero_bubble_shape(int p, int m, pipeline::ZeroBubble zb) {
  pipeline::ScheduleShape s{p, m, zb == pipeline::ZeroBubble::V ? 2 : 1};
  s.zero_bubble = zb;
  return s;
}

TEST(ZeroBubblePlan, UnitCostsGiveTheSchedulesOwnBubbleAndMemoryBound) {
  for (pipeline::ZeroBubble zb : {pipeline::ZeroBubble::H1, pipeline::ZeroBubble::V})
    for (int p : {2, 4})
      for (int m : {p, 2 * p + 1}) {
        const pipeline::ScheduleShape shape = zero_bubble_shape(p, m, zb);
        const PipelineRun run = simulate_pipeline(shape, unit_costs(p, shape.chunks), false);
        const double ideal = 3.0 * m * shape.chunks;
        for (int r = 0; r < p; ++r) {
          EXPECT_DOUBLE_EQ(run.compute[r], ideal);
          EXPECT_LE(run.peak_in_flight[r], pipeline::zero_bubble_activation_limit(shape, r));
        }
        EXPECT_NEAR((run.makespan - ideal) / ideal, pipeline::theoretical_bubble_fraction(shape), 1e-9)
            << "p=" << p << " m=" << m << " v=" << shape.chunks;
        // Activations are held to W: under ZB-H1 rank 0 holds as many as 1F1B's rank 0 at its peak.
        if (zb == pipeline::ZeroBubble::H1) {
          EXPECT_EQ(run.peak_in_flight[0], std::min(p, m));
        }
      }
}

TEST(ZeroBubblePlan, WeightPassesFillTheBubbleThatOneFOneBLeaves) {
  const int p = 4, m = 8;
  pipeline::ScheduleShape plain{p, m, 1};
  const PipelineRun one_f_one_b = simulate_pipeline(plain, unit_costs(p, 1), false);
  const PipelineRun h1 = simulate_pipeline(zero_bubble_shape(p, m, pipeline::ZeroBubble::H1), unit_costs(p, 1), false);
  // ZB-V's chunks are half a stage: half the costs each.
  PipelineCosts half = unit_costs(p, 2);
  for (auto* grid : {&half.forward_compute, &half.backward_compute, &half.backward_weight_compute})
    for (auto& stage : *grid)
      for (double& x : stage) x /= 2;
  const PipelineRun v = simulate_pipeline(zero_bubble_shape(p, m, pipeline::ZeroBubble::V), half, false);
  EXPECT_NEAR(one_f_one_b.makespan, 3 * m + 3 * (p - 1), 1e-9);  // 1F1B: (p - 1)(F + B) of bubble
  EXPECT_LT(h1.makespan - 3 * m, 0.6 * (one_f_one_b.makespan - 3 * m));  // p + 1 units of bubble against 3 (p - 1)
  EXPECT_LT(v.makespan, h1.makespan);
  // Without a split-off weight gradient (W free) every schedule still runs all of B.
  PipelineCosts no_split = unit_costs(p, 1);
  no_split.backward_weight_compute.clear();
  const PipelineRun free_w =
      simulate_pipeline(zero_bubble_shape(p, m, pipeline::ZeroBubble::H1), no_split, false);
  EXPECT_DOUBLE_EQ(free_w.compute[0], 3.0 * m);
}

// A GPT of 16 layers, hidden 4096, a small vocabulary (stages nearly balanced), tied embeddings, on 4 ranks.
model::ModelConfig small_gpt() {
  model::ModelConfig c;
  c.num_layers = 16;
  c.hidden_size = 4096;
  c.num_attention_heads = c.num_query_groups = 32;
  c.kv_channels = 128;
  c.ffn_hidden_size = 16384;
  c.seq_length = c.max_position_embeddings = 2048;
  c.vocab_size = c.padded_vocab_size = 8192;
  return c;
}

Layout pipelined(pipeline::ZeroBubble zb, int v = 1) {
  Layout l;
  l.pp = 4;
  l.virtual_stages = zb == pipeline::ZeroBubble::V ? 2 : v;
  l.zero_bubble = zb;
  l.micro_batch_size = 1;
  l.global_batch_size = 8;
  return l;
}

TEST(ZeroBubblePlan, TheWeightPassIsTheWeightGradientGemms) {
  const model::ModelConfig c = small_gpt();
  const DeviceSpec d = find_device("H100-SXM");
  const LayerTimes layer = layer_times(c, pipelined(pipeline::ZeroBubble::H1), d, 1);
  // Each linear layer's dW GEMM is its forward GEMM again (plus its fp32 accumulation): more than the
  // GEMMs' share of forward, less than half of backward (B has dX, the attention core and the rest).
  EXPECT_GT(layer.backward_weight_compute, 0.5 * (layer.forward_compute - layer.core_attention_forward));
  EXPECT_LT(layer.backward_weight_compute, 0.5 * layer.backward_compute);
  const PipelineCosts costs = pipeline_costs(c, pipelined(pipeline::ZeroBubble::H1), d);
  for (int r = 0; r < 4; ++r) EXPECT_GT(costs.backward_weight_compute[r][0], 0);
  EXPECT_GT(costs.backward_weight_compute[3][0], costs.backward_weight_compute[1][0]);  // + the output layer's dW
}

TEST(ZeroBubblePlan, ZbVPutsTheOutputLayerOnRankZeroBesideTheEmbedding) {
  const model::ModelConfig c = small_gpt();
  const DeviceSpec d = find_device("H100-SXM");
  const Layout v = pipelined(pipeline::ZeroBubble::V);
  const PipelineCosts costs = pipeline_costs(c, v, d);
  // Rank 0 holds model chunks 0 (embedding) and 7 (output layer); rank 3 chunks 3 and 4, layers alone.
  EXPECT_GT(costs.forward_compute[0][1], costs.forward_compute[3][0]);
  EXPECT_DOUBLE_EQ(costs.forward_compute[3][0], costs.forward_compute[3][1]);
  EXPECT_DOUBLE_EQ(costs.forward_compute[2][1], costs.forward_compute[3][1]);
  // With tied embeddings the output layer is the embedding itself: no copy on any rank, nothing to reduce.
  const RankParameters first = stage_parameters(c, v, 0), last = stage_parameters(c, v, 3);
  const Layout h1 = pipelined(pipeline::ZeroBubble::H1);
  EXPECT_LT(stage_parameters(c, v, 3).dense, stage_parameters(c, h1, 3).dense);
  EXPECT_DOUBLE_EQ(first.dense - last.dense,
                   static_cast<double>(c.padded_vocab_size + c.max_position_embeddings) * c.hidden_size +
                       norm_parameters(c));  // embedding, positions and the final norm
  const ClusterSpec cluster{d, 4};
  const Plan plan = make_plan(c, v, cluster, {});
  EXPECT_LE(plan.memory[0].in_flight, 8);  // at most 2 chunks x min(p, m)
}

TEST(ZeroBubblePlan, PlansCutTheBubbleOfOneFOneBAndInterleaving) {
  const model::ModelConfig c = small_gpt();
  const ClusterSpec cluster{find_device("H100-SXM"), 4};
  const Plan one_f_one_b = make_plan(c, pipelined(pipeline::ZeroBubble::Off), cluster, {});
  const Plan interleaved = make_plan(c, pipelined(pipeline::ZeroBubble::Off, 2), cluster, {});
  const Plan h1 = make_plan(c, pipelined(pipeline::ZeroBubble::H1), cluster, {});
  const Plan v = make_plan(c, pipelined(pipeline::ZeroBubble::V), cluster, {});
  // (At this size on an H100 the time model prices W at about a fifth of the backward: the bubble shrinks
  // by less than with F = B = W. Planned: 1F1B 71 ms, ZB-H1 54; interleaved 39, ZB-V 23.)
  EXPECT_LT(h1.time.pipeline_bubble, 0.85 * one_f_one_b.time.pipeline_bubble);
  EXPECT_LT(v.time.pipeline_bubble, 0.75 * interleaved.time.pipeline_bubble);
  EXPECT_GT(v.tflops_per_device, interleaved.tflops_per_device);
  EXPECT_LT(v.memory[0].activations, interleaved.memory[0].activations);  // and holds less than interleaving
  EXPECT_DOUBLE_EQ(h1.time.compute, one_f_one_b.time.compute);  // the same work, split differently
  // ZB-H1 holds 1F1B's rank-0 activations on every rank: rank 0 the same, the last rank more.
  EXPECT_DOUBLE_EQ(h1.memory[0].activations, one_f_one_b.memory[0].activations);
  EXPECT_GT(h1.memory[3].activations, one_f_one_b.memory[3].activations);
  EXPECT_EQ(describe(h1.layout).find(" zb-h1") != std::string::npos, true);
  EXPECT_EQ(describe(v.layout).find(" v2 zb-v") != std::string::npos, true);
}

TEST(ZeroBubblePlan, LayoutRulesAreTheTrainers) {
  const model::ModelConfig c = small_gpt();
  Layout l = pipelined(pipeline::ZeroBubble::V);
  l.global_batch_size = 6;  // 6 micro-batches on 4 ranks: interleaving refuses it, ZB-V does not
  EXPECT_EQ(layout_problem(c, l, 4), "");
  l.zero_bubble = pipeline::ZeroBubble::Off;
  EXPECT_NE(layout_problem(c, l, 4), "");
  l = pipelined(pipeline::ZeroBubble::V);
  l.virtual_stages = 1;
  EXPECT_NE(layout_problem(c, l, 4).find("ZB-V"), std::string::npos);
  l = pipelined(pipeline::ZeroBubble::H1);
  l.token_slices = {1024, 1024};
  EXPECT_NE(layout_problem(c, l, 4).find("token slices"), std::string::npos);
}

TEST(ZeroBubblePlan, TheSearchPlansZbH1AndZbVBesideTheirSchedules) {
  const model::ModelConfig c = small_gpt();
  Layout base;
  base.dp = 4;
  base.global_batch_size = 8;
  const SearchResult r = search_layouts(c, base, {find_device("H100-SXM"), 4}, {}, 128);
  int h1 = 0, v = 0;
  for (const Plan& p : r.ranked) {
    h1 += p.layout.zero_bubble == pipeline::ZeroBubble::H1;
    v += p.layout.zero_bubble == pipeline::ZeroBubble::V;
    if (p.layout.zero_bubble != pipeline::ZeroBubble::Off) {
      EXPECT_GT(p.layout.pp, 1);
      EXPECT_TRUE(p.layout.token_slices.empty());
    }
  }
  EXPECT_GT(h1, 0);
  EXPECT_GT(v, 0);
}

}  // namespace
}  // namespace tessera::plan
