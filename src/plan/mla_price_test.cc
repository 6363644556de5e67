// The planner's pricing of Multi-Latent Attention: its parameters per rank (the up projections and
// linear_proj split by heads, the down projections and latent norms replicated) and its activations (the
// model's record formula), against the model's own counts; under context parallelism the ring's buffers.
#include <gtest/gtest.h>

#include "model/activation_memory.h"
#include "plan/layout.h"
#include "plan/memory_model.h"
#include "plan/toy_model_testing.h"

namespace tessera::plan {
namespace {

model::ModelConfig mla_model(bool compressed_query) {
  model::ModelConfig c = toy_model();
  c.untie_embeddings_and_output_weights = true;  // no tied copy on the last stage
  c.qk_layernorm = true;
  c.mla.enabled = true;
  c.mla.q_lora_rank = compressed_query ? 64 : 0;
  c.mla.kv_lora_rank = 32;
  c.mla.qk_head_dim = 32;
  c.mla.qk_pos_emb_head_dim = 16;
  c.mla.v_head_dim = 24;
  return c;
}

TEST(MlaPrice, RanksHoldTheWholeModel) {
  for (bool compressed : {false, true}) {
    const model::ModelConfig c = mla_model(compressed);
    for (int pp : {1, 2, 4}) {
      Layout l;
      l.pp = pp;
      double total = 0;
      for (int r = 0; r < pp; ++r) total += stage_parameters(c, l, r).total();
      EXPECT_EQ(total, static_cast<double>(c.parameter_count())) << "pp=" << pp;
    }
    // Tensor parallelism splits the up projections and linear_proj; the rest is replicated.
    const double h = 256, qr = compressed ? 64 : 0, kr = 32;
    // Per layer the two norms, the down projections, the latent norms, linear_proj's and fc2's biases; the
    // final norm and the learned positions.
    const double replicated = 4 * (2 * h + qr * h + (kr + 16) * h + (compressed ? qr : 0) + kr + 2 * h) + h + 128 * h;
    Layout l;
    l.tp = 4;
    EXPECT_NEAR(stage_parameters(c, l, 0).total(),
                (static_cast<double>(c.parameter_count()) - replicated) / 4 + replicated, 1e-6)
        << (compressed ? "compressed query" : "linear_q_proj");
  }
}

TEST(MlaPrice, ActivationsAreTheLayersRecordInPlaceOfQkv) {
  model::ModelConfig c = mla_model(true);
  model::ModelConfig dense = c;
  dense.mla.enabled = false;
  for (int t : {1, 2, 4})
    for (bool sp : {false, true}) {
      if (sp && t == 1) continue;
      Layout l;
      l.tp = t;
      l.sequence_parallel = sp;
      l.micro_batch_size = 2;
      l.precision = Precision::Bf16;
      const double s = 128, b = 2, e = 2, q = 8 * 32;
      const double mla = model::mla_attention_record_bytes(c, {2, 128, t, sp}, e);
      EXPECT_NEAR(layer_activation_bytes(c, l, 1) - layer_activation_bytes(dense, l, 1),
                  s * b * (mla - 4 * q * e / t), 1e-6)
          << "t=" << t << (sp ? " sequence-parallel" : "");
    }
}

// Context parallelism (issue 53): the layout is accepted, with multi-token prediction too, and the ring passes
// each head's key and value at the attention's width, max(q_head_dim 48, v_head_dim 24), not kv_channels.
TEST(MlaPrice, TheRingPassesEachHeadsKeyAndValueAtTheAttentionsWidth) {
  model::ModelConfig c = mla_model(true);
  c.mtp_num_layers = 1;
  Layout l;
  l.cp = 2;
  l.tp = 2;
  l.sequence_parallel = true;
  l.micro_batch_size = l.global_batch_size = 2;
  l.precision = Precision::Bf16;
  EXPECT_EQ(layout_problem(c, l, 4), "");
  EXPECT_DOUBLE_EQ(ring_key_value_columns(c), 2.0 * 8 * 48);
  const double tokens = 128 / 2 * 2, kv_bytes = 2.0 * 8 * 48 / 2 * 2;  // a rank's tokens; K and V per token, bf16
  EXPECT_DOUBLE_EQ(ring_buffer_bytes(c, l), 4 * tokens * kv_bytes);
}

}  // namespace
}  // namespace tessera::plan
