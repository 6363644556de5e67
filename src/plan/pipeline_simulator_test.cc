// The simulator runs the schedule's op lists: with uniform costs its bubble is the closed form, its
// makespan equals pipeline::simulate_schedule's, and its in-flight counts are the schedule's. The trace
// of a plan has one well-formed track per stage.
#include "plan/pipeline_simulator.h"

#include <gtest/gtest.h>

#include <map>

#include "core/check.h"
#include "plan/trace.h"

namespace tessera::plan {
namespace {

PipelineCosts uniform(int p, int v, double forward, double backward, double p2p = 0) {
  PipelineCosts c;
  c.forward_compute.assign(p, std::vector<double>(v, forward));
  c.backward_compute.assign(p, std::vector<double>(v, backward));
  c.forward_comm.assign(p, std::vector<double>(v, 0));
  c.backward_comm.assign(p, std::vector<double>(v, 0));
  c.p2p_transfer = p2p;
  return c;
}

TEST(PipelineSimulator, BubbleOfOneFOneBAndInterleavedIsTheClosedForm) {
  for (int p : {2, 4}) {
    for (int v : {1, 2}) {
      for (int m : {p, 2 * p, 4 * p}) {
        const pipeline::ScheduleShape shape{p, m, v};
        // Each chunk costs 1/v of a stage's work, so ideal compute is m (f + b) per rank.
        const double f = 1.0 / v, b = 2.0 / v;
        PipelineRun run = simulate_pipeline(shape, uniform(p, v, f, b), false);
        const double ideal = m * 3.0;
        for (int r = 0; r < p; ++r) EXPECT_DOUBLE_EQ(run.compute[r], ideal);
        EXPECT_NEAR((run.makespan - ideal) / ideal, pipeline::theoretical_bubble_fraction(shape), 1e-9)
            << "p=" << p << " v=" << v << " m=" << m;
        for (int r = 0; r < p; ++r)
          EXPECT_EQ(run.peak_in_flight[r], pipeline::theoretical_peak_in_flight(shape, r)) << "stage " << r;
      }
    }
  }
}

TEST(PipelineSimulator, TokenSlicesShrinkTheBubbleToTeraPipesClosedForm) {
  // TeraPipe with n equal slices: the pipeline fills and drains by slices, (p - 1) / (m n).
  for (int p : {2, 4})
    for (int m : {1, 2, 4})
      for (int n : {2, 4}) {
        const pipeline::ScheduleShape shape{p, m, 1, n};
        PipelineRun run = simulate_pipeline(shape, uniform(p, 1, 1, 2), false);
        const double ideal = m * 3.0;
        for (int r = 0; r < p; ++r) EXPECT_DOUBLE_EQ(run.compute[r], ideal);
        EXPECT_NEAR((run.makespan - ideal) / ideal, pipeline::theoretical_bubble_fraction(shape), 1e-9)
            << "p=" << p << " m=" << m << " n=" << n;
        for (int r = 0; r < p; ++r)
          EXPECT_EQ(run.peak_in_flight[r], pipeline::theoretical_peak_in_flight(shape, r)) << "stage " << r;
      }
}

TEST(PipelineSimulator, UnevenSlicesFlowLikeTeraPipesLatencyModel) {
  // One micro-batch of uneven slices costing the same on every stage, no p2p: 1F1B runs every forward,
  // then the backwards in reverse, each a proportionate flow shop, so the makespan is
  // sum f + (p - 1) max f + sum b + (p - 1) max b (TeraPipe's T with m = 1).
  const int p = 3;
  const std::vector<double> f = {1, 2, 0.5}, b = {2, 4, 1};
  std::vector<PipelineCosts> slices;
  for (size_t i = 0; i < f.size(); ++i) slices.push_back(uniform(p, 1, f[i], b[i]));
  const PipelineRun run = simulate_pipeline({p, 1, 1, 3}, slices, false);
  EXPECT_DOUBLE_EQ(run.makespan, (3.5 + (p - 1) * 2.0) + (7.0 + (p - 1) * 4.0));
  for (int r = 0; r < p; ++r) EXPECT_DOUBLE_EQ(run.compute[r], 10.5);
  EXPECT_THROW(simulate_pipeline({p, 1, 1, 2}, slices, false), Error);  // three costs for two slices
}

TEST(PipelineSimulator, AgreesWithTheScheduleLayersSimulator) {
  const pipeline::ScheduleShape shape{4, 8, 2};
  pipeline::OpCosts costs;
  costs.forward_seconds = 1.5;
  costs.backward_seconds = 3.25;
  costs.p2p_seconds = 0.2;
  const pipeline::SimulatedRun theirs = pipeline::simulate_schedule(shape, costs);
  const PipelineRun ours = simulate_pipeline(shape, uniform(4, 2, 1.5, 3.25, 0.2), false);
  EXPECT_NEAR(ours.makespan, theirs.makespan, 1e-9);
  for (int r = 0; r < 4; ++r) EXPECT_NEAR(ours.compute[r], theirs.busy_seconds[r], 1e-9);
}

TEST(PipelineSimulator, AccountsEveryRankSecond) {
  // An expensive last stage (the output layer) makes the others wait: their idle time is bubble.
  const pipeline::ScheduleShape shape{4, 8, 1};
  PipelineCosts c = uniform(4, 1, 1, 2, 0.1);
  c.forward_compute[3][0] += 0.5;
  c.backward_compute[3][0] += 1.0;
  c.forward_comm.assign(4, std::vector<double>(1, 0.25));
  c.p2p_local = 0.05;
  PipelineRun run = simulate_pipeline(shape, c, true);
  for (int r = 0; r < 4; ++r) {
    EXPECT_NEAR(run.compute[r] + run.tp_comm[r] + run.p2p[r] + run.bubble[r], run.finish[r], 1e-9);
    EXPECT_NEAR(run.tp_comm[r], 8 * 0.25, 1e-9);
  }
  EXPECT_GT(run.bubble[0], run.bubble[3]);
  // The recorded events of a rank do not overlap and cover its time up to its finish.
  std::map<int, double> covered, last_end;
  for (const TimelineEvent& e : run.events) {
    EXPECT_GE(e.start + 1e-12, last_end[e.stage]) << e.name;
    last_end[e.stage] = e.start + e.duration;
    covered[e.stage] += e.duration;
  }
  for (int r = 0; r < 4; ++r) EXPECT_NEAR(covered[r], run.finish[r], 1e-9);
}

TEST(Trace, OneTrackPerStageWithEveryOp) {
  model::ModelConfig c;
  c.num_layers = 8;
  c.hidden_size = 512;
  c.num_attention_heads = 8;
  c.num_query_groups = 8;
  c.kv_channels = 64;
  c.ffn_hidden_size = 2048;
  c.seq_length = 256;
  c.max_position_embeddings = 256;
  c.vocab_size = c.padded_vocab_size = 1024;
  Layout l;
  l.tp = 2;
  l.pp = 4;
  l.dp = 1;
  l.virtual_stages = 2;
  l.micro_batch_size = 1;
  l.global_batch_size = 8;
  PlanOptions options;
  options.record_timeline = true;
  Plan plan = make_plan(c, l, {find_device("H100-SXM"), 8}, options);
  nlohmann::json trace = chrome_trace(plan);
  int tracks = 0, forwards = 0, backwards = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["name"] == "thread_name") ++tracks;
    if (e.value("cat", "") == "forward") ++forwards;
    if (e.value("cat", "") == "backward") ++backwards;
    if (e["ph"] == "X") {
      EXPECT_GE(e["ts"].get<double>(), 0);
      EXPECT_LE(e["ts"].get<double>() + e["dur"].get<double>(), plan.time.total() * 1e6 * (1 + 1e-9));
    }
  }
  EXPECT_EQ(tracks, 4);
  EXPECT_EQ(forwards, 4 * 8 * 2);  // every (stage, micro-batch, chunk)
  EXPECT_EQ(backwards, 4 * 8 * 2);
}

}  // namespace
}  // namespace tessera::plan
