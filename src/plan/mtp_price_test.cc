// The planner's pricing of multi-token prediction (--mtp-num-layers): the modules' parameters on the stage
// with the head (their sum over stages is the model's count), their activations (the model's record
// formula for each held micro-batch) and time on that stage alone.
#include <gtest/gtest.h>

#include "model/activation_memory.h"
#include "plan/memory_model.h"
#include "plan/time_model.h"
#include "plan/toy_model_testing.h"

namespace tessera::plan {
namespace {

model::ModelConfig mtp_model(int64_t modules) {
  model::ModelConfig c = toy_model();
  c.position_embedding = model::PositionEmbedding::Rope;
  c.swiglu = true;
  c.add_bias_linear = false;
  c.mtp_num_layers = modules;
  return c;
}

TEST(MtpPrice, RanksHoldTheWholeModelTheModulesOnTheHeadsStage) {
  const model::ModelConfig c = mtp_model(2), plain = mtp_model(0);
  for (int pp : {1, 2, 4}) {
    Layout l;
    l.pp = pp;
    double total = 0;
    for (int r = 0; r < pp; ++r) total += stage_parameters(c, l, r).total();
    const double tied_copy = pp > 1 ? 1024.0 * 256 : 0;  // the last stage's copy of the tied word embedding
    EXPECT_EQ(total, static_cast<double>(c.parameter_count()) + tied_copy) << "pp=" << pp;
    for (int r = 0; r + 1 < pp; ++r) EXPECT_EQ(stage_parameters(c, l, r).total(), stage_parameters(plain, l, r).total());
  }
  // Tensor parallelism splits eh_proj and the layer's projections; the three norms are replicated.
  Layout l;
  l.tp = 4;
  const double h = 256, layer = 2 * h + (4 * h * h + 3 * h * 1024) / 4;  // norms, attention, SwiGLU MLP
  EXPECT_NEAR(mtp_parameters(c, l).total(), 2 * (3 * h + 2 * h * h / 4 + layer), 1e-6);
}

TEST(MtpPrice, TheHeadsStageHoldsTheModulesRecordsAndTime) {
  const model::ModelConfig c = mtp_model(2), plain = mtp_model(0);
  const DeviceSpec d = find_device("A100-80GB");
  for (bool sp : {false, true}) {
    Layout l;
    l.tp = 2;
    l.pp = 2;
    l.sequence_parallel = sp;
    l.micro_batch_size = 2;
    l.precision = Precision::Bf16;
    // Two held micro-batches of two modules: a layer as the planner prices it, and the glue and logits.
    const double expected = 2 * 2 * (layer_activation_bytes(c, l, 4) + model::mtp_module_extra_bytes(c, {2, 128, 2, sp}));
    EXPECT_NEAR(stage_memory(c, l, d, 1, 2).activations - stage_memory(plain, l, d, 1, 2).activations, expected,
                1e-6 * expected);
    EXPECT_EQ(stage_memory(c, l, d, 0, 2).activations, stage_memory(plain, l, d, 0, 2).activations);
    const PipelineCosts with = pipeline_costs(c, l, d), without = pipeline_costs(plain, l, d);
    EXPECT_EQ(with.forward_compute[0][0], without.forward_compute[0][0]);
    // Each module costs at least its layer again, and so more than a layer of the stage's two.
    EXPECT_GT(with.forward_compute[1][0] - without.forward_compute[1][0], without.forward_compute[1][0] / 2 * 0.9);
    EXPECT_GT(with.backward_compute[1][0], without.backward_compute[1][0]);
  }
}

}  // namespace
}  // namespace tessera::plan
