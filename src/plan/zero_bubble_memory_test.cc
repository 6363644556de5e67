// The planner's activation memory under zero bubble (ZB-H1, ZB-V): a chunk's record lives from its F to
// its B, then what its W pass reads (each deferred GEMM's fp32 input and output gradient, whole
// sequences) until its W; priced with the trainer's model functions and walked along the trainer's op
// lists, and checked here against hand numbers and the training memory report's theory.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "pipeline/zero_bubble.h"
#include "plan/memory_model.h"
#include "plan/planner.h"
#include "plan/run_layout.h"
#include "train/args/arguments.h"
#include "train/memory_report.h"
#include "train/trainer_testing.h"

namespace tessera::plan {
namespace {

// 16 layers, hidden 4096, 32 heads of 128, MLP 16384 (GeLU), sequence 2048, vocabulary 8192, tied.
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

Layout pipelined(pipeline::ZeroBubble zb, int pp, int64_t global_batch) {
  Layout l;
  l.pp = pp;
  l.virtual_stages = zb == pipeline::ZeroBubble::V ? 2 : 1;
  l.zero_bubble = zb;
  l.micro_batch_size = 1;
  l.global_batch_size = global_batch;
  return l;
}

TEST(ZeroBubbleMemory, TheWeightPassHoldsEachDeferredGemmsFp32InputAndOutputGradient) {
  const model::ModelConfig c = small_gpt();
  const double rows = 2048, GiB = 1024.0 * 1024 * 1024;
  // Per row of a layer: QKV's input h and output gradient 3h, linear_proj's input h and output gradient h,
  // fc1's input h and output gradient 4h, fc2's input 4h and output gradient h: 16h = 65536 fp32 numbers.
  const double layer = rows * 65536 * 4;  // 512 MiB
  const double head = rows * (8192 + 4096) * 4;  // the logits' gradient and the final norm's output
  const Layout h1 = pipelined(pipeline::ZeroBubble::H1, 4, 8);
  EXPECT_DOUBLE_EQ(weight_pass_bytes(c, h1, 0, 0), 4 * layer);
  EXPECT_DOUBLE_EQ(weight_pass_bytes(c, h1, 0, 0), 2 * GiB);
  EXPECT_DOUBLE_EQ(weight_pass_bytes(c, h1, 3, 0), 4 * layer + head);
  // ZB-V: two layers a chunk; rank 0's second chunk is the model's last (the output layer).
  const Layout v = pipelined(pipeline::ZeroBubble::V, 4, 8);
  EXPECT_DOUBLE_EQ(weight_pass_bytes(c, v, 0, 0), 2 * layer);
  EXPECT_DOUBLE_EQ(weight_pass_bytes(c, v, 0, 1), 2 * layer + head);
  EXPECT_DOUBLE_EQ(weight_pass_bytes(c, v, 3, 1), 2 * layer);
  // tp 2 with sequence parallelism: the columns halve, the rows stay the whole sequence (gathered):
  // 2h + 4h / 2 (attention) + 2h + 8h / 2 (MLP) = 10h per row.
  Layout sp = h1;
  sp.tp = 2;
  sp.sequence_parallel = true;
  EXPECT_DOUBLE_EQ(weight_pass_bytes(c, sp, 1, 0), 4 * rows * 10 * 4096 * 4);
  // Without zero bubble there is no W pass.
  EXPECT_EQ(weight_pass_bytes(c, pipelined(pipeline::ZeroBubble::Off, 4, 8), 0, 0), 0);
}

// The walks by hand over the trainer's op lists at p 2, m 4 (F, B, W of micro-batch i on chunk j: Fi.j ...):
//   ZB-H1 rank 0: F0 F1 B0 W0 B1 F2 W1 F3 B2 W2 B3 W3 -> peak max(2R, R + W)
//   ZB-H1 rank 1: F0 B0 F1 B1 W0 W1 F2 B2 F3 B3 W2 W3 -> peak max(R + W, 2W)
//   ZB-V rank 0:  F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 B0.0 W0.1 B1.0 W1.1 W0.0 F2.0 W1.0 F3.0 ... (the same again)
//                 -> peak max(2R0 + R1 + W1, 2R0 + 2W1, R0 + W0 + 2W1, 2W0 + W1)
// with R (Rj) a micro-batch's record (of chunk j), taken from the planner's pricing of 1F1B and
// interleaving (one held micro-batch more), and W (Wj) the W pass's bytes.
TEST(ZeroBubbleMemory, TheStagePeakIsTheWalkOfRecordsToBAndWeightPassesToW) {
  const model::ModelConfig c = small_gpt();
  const DeviceSpec d = find_device("H100-SXM");
  const Layout h1 = pipelined(pipeline::ZeroBubble::H1, 2, 4), plain = pipelined(pipeline::ZeroBubble::Off, 2, 4);
  ASSERT_EQ(layout_problem(c, h1, 2), "");
  for (int stage : {0, 1}) {
    const double base = stage_memory(c, plain, d, stage, 0).activations;
    const double record = stage_memory(c, plain, d, stage, 1).activations - base;
    const double weight = weight_pass_bytes(c, h1, stage, 0);
    const double peak = stage == 0 ? std::max(2 * record, record + weight) : std::max(record + weight, 2 * weight);
    EXPECT_DOUBLE_EQ(stage_memory(c, h1, d, stage, 2).activations, base + peak) << "stage " << stage;
    // The last rank holds one record at a time, and W passes besides.
    if (stage == 1) {
      EXPECT_GT(stage_memory(c, h1, d, stage, 2).activations, base + record);
    }
  }
  // ZB-V rank 0 holds model chunks 0 (the embedding) and 3 (the output layer and its logits).
  Layout v = pipelined(pipeline::ZeroBubble::V, 2, 4), interleaved = v;
  interleaved.zero_bubble = pipeline::ZeroBubble::Off;
  ASSERT_EQ(layout_problem(c, v, 2), "");
  const double base = stage_memory(c, interleaved, d, 0, 0).activations;
  const double r0 = stage_memory(c, interleaved, d, 0, 1).activations - base;  // a chunk and the embedding
  const double r1 = stage_memory(c, interleaved, d, 0, 2).activations - base - r0;  // a chunk
  const double w0 = weight_pass_bytes(c, v, 0, 0), w1 = weight_pass_bytes(c, v, 0, 1);
  const double logits = 2048.0 * 8192 * 4;  // one micro-batch's fp32 logits, now on rank 0
  const double peak = std::max({2 * r0 + r1 + w1, 2 * r0 + 2 * w1, r0 + w0 + 2 * w1, 2 * w0 + w1});
  EXPECT_DOUBLE_EQ(stage_memory(c, v, d, 0, 4).activations, base + logits + peak);
  // make_plan walks the same lists (built once for all stages).
  const Plan plan = make_plan(c, v, {d, 2}, {});
  EXPECT_DOUBLE_EQ(plan.memory[0].activations, base + logits + peak);
}

// The W pass the planner prices is the one the training memory report prints (the same model functions on
// the layout `tessera plan` reads from the run's flags), on a few zero-bubble runs.
TEST(ZeroBubbleMemory, TheWeightPassIsTheMemoryReports) {
  struct Run {
    int64_t world;
    std::string flags;
  };
  const std::string model = "--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
                            "--max-position-embeddings 32 --mock-data --tokenizer-type NullTokenizer "
                            "--vocab-size 128 --micro-batch-size 2 --global-batch-size 8 --lr 1e-3 --train-iters 1 ";
  for (const Run& run : {Run{2, "--pipeline-model-parallel-size 2 --enable-zero-bubble"},
                         Run{4, "--pipeline-model-parallel-size 2 --enable-zero-bubble --tensor-model-parallel-size 2 "
                                "--sequence-parallel --swiglu"},
                         Run{2, "--pipeline-model-parallel-size 2 --zero-bubble-v-schedule"}}) {
    const train::TrainArguments a = train::parse_train_arguments(train::testing::split_flags(model + run.flags), run.world);
    const Layout l = layout_of_run(a);
    const pipeline::ScheduleShape shape = train::schedule_shape(a, a.num_micro_batches);
    for (int stage = 0; stage < l.pp; ++stage) {
      const train::MemoryPrediction p = train::predict_memory(a, shape, stage, 0);
      double most = 0;
      for (int chunk = 0; chunk < l.virtual_stages; ++chunk) most = std::max(most, weight_pass_bytes(a.model, l, stage, chunk));
      EXPECT_GT(most, 0);
      EXPECT_DOUBLE_EQ(most, p.weight_pass_per_micro_batch) << run.flags << ", stage " << stage;
    }
  }
}

}  // namespace
}  // namespace tessera::plan
