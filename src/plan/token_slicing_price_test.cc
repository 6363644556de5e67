// The planner's TeraPipe pricing (plan/token_slicing_price.h): the time model's slice cost (context adds only
// attention, the unsliced slice is the stage's time), and the flag's forms and errors. The latency model
// and the dynamic program are tested where they live, pipeline/token_slicing_search_test.cc.
#include "plan/token_slicing_price.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/check.h"
#include "plan/time_model.h"

namespace tessera::plan {
namespace {

model::ModelConfig small_gpt() {
  model::ModelConfig c;
  c.num_layers = 8;
  c.hidden_size = 256;
  c.num_attention_heads = 8;
  c.num_query_groups = 8;
  c.kv_channels = 32;
  c.ffn_hidden_size = 1024;
  c.seq_length = 512;
  c.max_position_embeddings = 512;
  c.vocab_size = 1000;
  c.padded_vocab_size = 1024;
  return c;
}

TEST(StageSliceCost, TheUnslicedSequenceIsTheSlowestStagePlusItsTransfersAndContextAddsAttention) {
  const model::ModelConfig c = small_gpt();
  Layout l;
  l.pp = 4;
  l.global_batch_size = 4;
  const DeviceSpec d = find_device("A100-80GB");
  const SliceCost t = stage_slice_cost(c, l, d);
  const PipelineCosts costs = pipeline_costs(c, l, d);
  double slowest = 0;
  for (size_t s = 0; s < costs.forward_compute.size(); ++s)
    slowest = std::max(slowest, costs.forward_compute[s][0] + costs.forward_comm[s][0] + costs.backward_compute[s][0] +
                                    costs.backward_comm[s][0]);
  EXPECT_NEAR(t(512, 0), slowest + 2 * costs.p2p_transfer, 1e-12);
  const AttentionTimes a = core_attention_times(c, l, d, 64, 448);
  EXPECT_NEAR(t(64, 448) - t(64, 0), 2 * (a.forward + a.backward), 1e-12);  // 2 layers per stage
  EXPECT_GT(t(64, 448), t(64, 0));
  EXPECT_LT(t(64, 0), t(128, 0));
}

TEST(SlicePipelineCosts, ASliceIsAShortSequencePlusItsLayersAttentionToTheCache) {
  const model::ModelConfig c = small_gpt();
  Layout l;
  l.pp = 4;
  l.global_batch_size = 4;
  l.token_slices = {448, 64};
  const DeviceSpec d = find_device("A100-80GB");
  model::ModelConfig short_sequence = c;
  short_sequence.seq_length = 64;
  const PipelineCosts alone = pipeline_costs(short_sequence, l, d);
  const std::vector<PipelineCosts> slices = token_slice_costs(c, l, d);
  ASSERT_EQ(slices.size(), 2u);
  const AttentionTimes a = core_attention_times(c, l, d, 64, 448);
  for (int r = 0; r < 4; ++r) {  // two layers per stage, each attending to the 448 cached keys
    EXPECT_NEAR(slices[1].forward_compute[r][0], alone.forward_compute[r][0] + 2 * a.forward, 1e-15);
    EXPECT_NEAR(slices[1].backward_compute[r][0], alone.backward_compute[r][0] + 2 * a.backward, 1e-15);
    EXPECT_DOUBLE_EQ(slices[1].forward_comm[r][0], alone.forward_comm[r][0]);
  }
  EXPECT_DOUBLE_EQ(slices[1].p2p_transfer, alone.p2p_transfer);
  model::ModelConfig first = c;
  first.seq_length = 448;
  EXPECT_DOUBLE_EQ(slices[0].forward_compute[0][0], pipeline_costs(first, l, d).forward_compute[0][0]);
}

// Multi-token prediction under token slices runs its modules once over the whole sequence after the last
// slice (model/sliced_multi_token_prediction.h): no slice is priced with them, the last slice's ops on the
// head's stage carry them at the whole length, and TeraPipe's latency adds them once per micro-batch.
TEST(SlicedMtp, TheModulesRunOnceOverTheWholeSequenceInTheLastSlicesOps) {
  model::ModelConfig c = small_gpt(), plain = small_gpt();
  c.mtp_num_layers = 2;
  Layout l;
  l.pp = 4;
  l.global_batch_size = 4;
  l.token_slices = {256, 128, 128};
  const DeviceSpec d = find_device("A100-80GB");
  const MtpTimes m = mtp_times(c, l, d);
  ASSERT_GT(m.forward_compute, 0);
  // The modules at the whole length are what pipeline_costs adds to the unsliced head.
  const PipelineCosts whole = pipeline_costs(c, l, d), whole_plain = pipeline_costs(plain, l, d);
  EXPECT_NEAR(whole.forward_compute[3][0] - whole_plain.forward_compute[3][0], m.forward_compute, 1e-12);
  EXPECT_NEAR(whole.backward_compute[3][0] - whole_plain.backward_compute[3][0], m.backward_compute, 1e-12);
  EXPECT_NEAR(whole.forward_comm[3][0] - whole_plain.forward_comm[3][0], m.forward_comm, 1e-12);
  const std::vector<PipelineCosts> with = token_slice_costs(c, l, d), without = token_slice_costs(plain, l, d);
  ASSERT_EQ(with.size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    for (int r = 0; r < 4; ++r) {
      const bool carries = i == 2 && r == 3;  // the last slice on the last stage
      EXPECT_DOUBLE_EQ(with[i].forward_compute[r][0],
                       without[i].forward_compute[r][0] + (carries ? m.forward_compute : 0.0)) << i << " " << r;
      EXPECT_DOUBLE_EQ(with[i].backward_compute[r][0],
                       without[i].backward_compute[r][0] + (carries ? m.backward_compute : 0.0)) << i << " " << r;
      EXPECT_DOUBLE_EQ(with[i].forward_comm[r][0], without[i].forward_comm[r][0] + (carries ? m.forward_comm : 0.0));
      EXPECT_DOUBLE_EQ(with[i].backward_comm[r][0],
                       without[i].backward_comm[r][0] + (carries ? m.backward_comm : 0.0));
    }
  // The latency model: t leaves the modules out, the whole-sequence term adds them per micro-batch.
  const SliceCost t = stage_slice_cost(c, l, d), t_plain = stage_slice_cost(plain, l, d);
  EXPECT_DOUBLE_EQ(t(128, 256), t_plain(128, 256));
  const double w = sliced_mtp_seconds(c, l, d);
  EXPECT_DOUBLE_EQ(w, m.forward_compute + m.forward_comm + m.backward_compute + m.backward_comm);
  const TokenSlicingPrice price = price_token_slicing(c, l, d), price_plain = price_token_slicing(plain, l, d);
  EXPECT_NEAR(price.sliced - price_plain.sliced, l.micro_batches() * w, 1e-12 * price.sliced);
  EXPECT_NEAR(price.unsliced - price_plain.unsliced, l.micro_batches() * w, 1e-12 * price.unsliced);
  // The simulated pipeline: the last stage runs the modules once per micro-batch more, and the iteration
  // is longer by at least that much of the last stage's work beyond the slices' own.
  const pipeline::ScheduleShape shape = schedule_shape(l);
  const PipelineRun run = simulate_pipeline(shape, with, false), run_plain = simulate_pipeline(shape, without, false);
  EXPECT_NEAR(run.compute[3] - run_plain.compute[3], shape.micro_batches * (m.forward_compute + m.backward_compute),
              1e-9 * run.compute[3]);
  EXPECT_EQ(run.compute[0], run_plain.compute[0]);
  EXPECT_GT(run.makespan, run_plain.makespan);
}

TEST(ParseTokenSlices, AutoACountOrALengthList) {
  const SliceCost t = [](int64_t l, int64_t c) { return 1.0 + 0.5 * l + 0.01 * l * c; };
  EXPECT_EQ(parse_token_slices("4", 64, t, 1, 4), (std::vector<int64_t>{16, 16, 16, 16}));
  EXPECT_EQ(parse_token_slices("40,16,8", 64, t, 1, 4), (std::vector<int64_t>{40, 16, 8}));
  EXPECT_EQ(parse_token_slices("auto", 64, t, 1, 4), best_token_slicing(64, 8, t, 1, 4));
  auto error = [&](const std::string& v, int64_t seq) {
    try {
      parse_token_slices(v, seq, t, 1, 4);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error("5", 64).find("5 equal slices must divide --seq-length=64"), std::string::npos);
  EXPECT_NE(error("40,16", 64).find("sum to 56, not --seq-length=64"), std::string::npos);
  EXPECT_NE(error("a,b", 64).find("must be auto, a number of slices"), std::string::npos);
  EXPECT_NE(error("0", 64).find("must be auto"), std::string::npos);
  EXPECT_NE(error("auto", 60).find("must be a multiple of 8"), std::string::npos);
}

}  // namespace
}  // namespace tessera::plan
