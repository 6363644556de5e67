// The planner's pricing of multi-token prediction (--mtp-num-layers): the modules' parameters on the stage
// with the head (their sum over stages is the model's count), the last stage's copies of the embeddings
// the modules look up (against the parameters, gradients and Adam state the trainer's own chunks and
// optimizer hold), their activations (the model's record formula for each held micro-batch) and time on
// that stage alone.
#include <gtest/gtest.h>

#include <memory>

#include "model/activation_memory.h"
#include "model/model_factory.h"
#include "optim/adamw_optimizer.h"
#include "plan/layout.h"
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

// What `tessera train` holds on one rank of `stage` (tp 1): its chunks built as the trainer builds them
// (model::build_model_chunk, in chunk order, into one parameter set) and AdamW's moments over them.
struct RankHolds {
  int64_t parameters = 0, gradient_bytes = 0, optimizer_bytes = 0;
};
RankHolds trainer_rank(const model::ModelConfig& c, const Layout& l, int stage) {
  const pipeline::ScheduleShape shape = schedule_shape(l);
  model::ParameterSet params;
  std::vector<std::unique_ptr<model::LanguageModelChunk>> chunks;
  for (int k = 0; k < shape.chunks; ++k) {
    const pipeline::LayerRange r = pipeline::chunk_layers(static_cast<int>(c.num_layers), shape, {stage, k});
    chunks.push_back(model::build_model_chunk(c, params, parallel::TensorParallelContext::single_process(),
                                              {r.first, r.count, pipeline::is_first_chunk(shape, {stage, k}),
                                               pipeline::is_last_chunk(shape, {stage, k})}));
  }
  params.allocate(7);
  const optim::AdamWOptimizer adam(params, optim::AdamWConfig{}, nullptr, true);
  return {params.numel(), static_cast<int64_t>(params.grads().nbytes()), adam.state_bytes()};
}

TEST(MtpPrice, TheLastStagesEmbeddingCopiesAreWhatTheTrainerHolds) {
  // Untied embeddings and learned absolute positions: the last stage copies the word embedding and the
  // positions (a tied model's output layer is its word table already; RoPE has no positions).
  const DeviceSpec d = find_device("A100-80GB");
  for (bool untied : {false, true})
    for (bool learned : {false, true}) {
      model::ModelConfig c = mtp_model(1);
      c.untie_embeddings_and_output_weights = untied;
      if (learned) c.position_embedding = model::PositionEmbedding::LearnedAbsolute;
      const double h = 256, copies = (untied ? 1024 * h : 0) + (learned ? 128 * h : 0);
      for (int pp : {2, 4})
        for (pipeline::ZeroBubble zb : {pipeline::ZeroBubble::Off, pipeline::ZeroBubble::V}) {
          if (zb == pipeline::ZeroBubble::V && pp == 4) continue;  // 4 layers: ZB-V needs 2 per stage
          Layout l;
          l.pp = pp;
          l.zero_bubble = zb;
          l.virtual_stages = zb == pipeline::ZeroBubble::V ? 2 : 1;
          l.global_batch_size = 2 * pp;
          l.precision = Precision::Fp32;
          const std::string what = str_cat(untied ? "untied" : "tied", learned ? ", learned positions" : ", RoPE",
                                           ", pp ", pp, zb == pipeline::ZeroBubble::V ? ", ZB-V" : "");
          // Under ZB-V the head is on rank 0 beside the embedding: the modules use it, no copy.
          const int last = head_stage(l);
          EXPECT_EQ(mtp_embedding_copies(c, l, last), last == 0 ? 0.0 : copies) << what;
          for (int r = 0; r < pp; ++r) {
            if (r != last) {
              EXPECT_EQ(mtp_embedding_copies(c, l, r), 0.0) << what << " stage " << r;
            }
            // fp32 without the distributed optimizer: a weight, a gradient and two moments of 4 bytes each.
            const RankHolds held = trainer_rank(c, l, r);
            const MemoryBreakdown m = stage_memory(c, l, d, r, 1);
            EXPECT_EQ(stage_parameters(c, l, r).total(), static_cast<double>(held.parameters)) << what << " stage " << r;
            EXPECT_EQ(m.parameters, 4.0 * static_cast<double>(held.parameters)) << what << " stage " << r;
            EXPECT_EQ(m.gradients, static_cast<double>(held.gradient_bytes)) << what << " stage " << r;
            EXPECT_EQ(m.optimizer, static_cast<double>(held.optimizer_bytes)) << what << " stage " << r;
          }
        }
    }
}

TEST(MtpPrice, TheEmbeddingGroupSumsTheCopiesGradients) {
  // Untied with RoPE and no modules, the first and last stages share nothing; with the modules they sum
  // the word embedding's gradient over the embedding group, and the data-parallel time grows by it.
  model::ModelConfig c = mtp_model(1), plain = mtp_model(0);
  c.untie_embeddings_and_output_weights = plain.untie_embeddings_and_output_weights = true;
  const DeviceSpec d = find_device("A100-80GB");
  Layout l;
  l.pp = 2;
  l.dp = 2;
  l.global_batch_size = 8;
  const double first = data_parallel_seconds(c, l, d, 0), first_plain = data_parallel_seconds(plain, l, d, 0);
  EXPECT_GT(first, first_plain);
  // The first stage's parameters are the same; only the all-reduce between the stages differs.
  EXPECT_EQ(stage_parameters(c, l, 0).total(), stage_parameters(plain, l, 0).total());
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
