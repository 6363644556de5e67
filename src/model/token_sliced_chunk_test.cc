#include "model/token_sliced_chunk.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "model/activation_memory.h"
#include "model/gpt_model.h"
#include "model/model_testing.h"

namespace tessera::model {
namespace {

// 3 layers over 64 tokens, GPT-2 or Llama style (model_testing.h), dropout on.
ModelConfig tiny_config(bool llama_style) { return testing::tiny_gpt_config(llama_style, 3, 64, 64); }

struct Step {
  double loss = 0;
  std::vector<std::pair<std::string, double>> auxiliary;  // multi-token prediction's mtp_k losses
  std::vector<float> grads;
  int64_t record_bytes = 0;
};

// One training step's forward and backward of the whole model, sliced (slices non-empty) or not.
Step run_step(const ModelConfig& c, const std::vector<int64_t>& slices, const Recompute& recompute = {}) {
  const int64_t batch = 2;
  ParameterSet params;
  std::unique_ptr<LanguageModelChunk> model = std::make_unique<GptModel>(c, params);
  if (!slices.empty()) model = with_token_slices(std::move(model), slices);
  model->set_recompute(recompute);
  params.allocate(5);
  const MicroBatch mb = testing::random_batch(c, batch, 11);
  const ForwardContext ctx = testing::context(c, batch, /*training=*/true);
  std::unique_ptr<ChunkRecord> rec = model->make_record();
  LossSums losses;
  Tensor out = model->forward(mb, Tensor(), ctx, *rec, losses);
  EXPECT_FALSE(out.defined());
  Step s;
  s.loss = losses.lm;
  s.auxiliary = losses.auxiliary;
  s.record_bytes = rec->bytes();
  model->backward(*rec, Tensor(), ctx, 0.125f);
  s.grads.assign(params.grads().f32(), params.grads().f32() + params.numel());
  return s;
}

// Loss and every parameter's gradient within relative 1e-5 (of the parameter's largest gradient).
void expect_same_step(const ModelConfig& c, const Step& want, const Step& got) {
  EXPECT_NEAR(got.loss, want.loss, 1e-5 * std::fabs(want.loss));
  ASSERT_EQ(got.auxiliary.size(), want.auxiliary.size());
  for (size_t i = 0; i < want.auxiliary.size(); ++i) {
    EXPECT_EQ(got.auxiliary[i].first, want.auxiliary[i].first);
    EXPECT_NEAR(got.auxiliary[i].second, want.auxiliary[i].second, 1e-5 * std::fabs(want.auxiliary[i].second))
        << want.auxiliary[i].first;
  }
  ParameterSet params;
  GptModel names(c, params);  // the parameters' names and places in the flat buffer
  params.allocate(5);
  ASSERT_EQ(got.grads.size(), want.grads.size());
  for (const Parameter& p : params.params()) {
    const int64_t at = p.offset, n = p.value.numel();
    float scale = 0;
    for (int64_t i = 0; i < n; ++i) scale = std::max(scale, std::fabs(want.grads[at + i]));
    ASSERT_GT(scale, 0.0f) << p.spec.name << " has no gradient";
    for (int64_t i = 0; i < n; ++i)
      ASSERT_NEAR(got.grads[at + i], want.grads[at + i], 1e-5f * scale) << p.spec.name << " element " << i;
  }
}

void check_slicings(bool llama_style) {
  const ModelConfig c = tiny_config(llama_style);
  const Step whole = run_step(c, {});
  for (const std::vector<int64_t>& slices : {std::vector<int64_t>{16, 16, 16, 16}, std::vector<int64_t>{8, 24, 16, 16},
                                             std::vector<int64_t>{1, 62, 1}, std::vector<int64_t>{64}}) {
    SCOPED_TRACE(str_cat(llama_style ? "llama" : "gpt2", " slices ", slices.size(), " first ", slices[0]));
    const Step sliced = run_step(c, slices);
    expect_same_step(c, whole, sliced);
    // The record holds each layer's key/value cache at full length (and its gradients after backward).
    const int64_t cache = c.num_layers * 2 * c.seq_length * 2 * c.num_query_groups * c.kv_channels * 4;
    EXPECT_GE(sliced.record_bytes, cache);
  }
}

TEST(TokenSlices, Gpt2StyleSlicesGiveTheWholeSequencesLossAndGradients) { check_slicings(false); }
TEST(TokenSlices, LlamaStyleSlicesGiveTheWholeSequencesLossAndGradients) { check_slicings(true); }

TEST(TokenSlices, RecomputedLayersReadTheCacheToo) {
  const ModelConfig c = tiny_config(true);
  const Recompute r{RecomputeMethod::Uniform, 2};
  expect_same_step(c, run_step(c, {}, r), run_step(c, {8, 24, 16, 16}, r));
}

// Multi-Latent Attention (issue 53): the cache holds each head's up-projected key [no-RoPE | RoPE] and value
// (keys of 10 columns zero-padded to the values' 12), the RoPE parts rotated with YaRN at the slice's global
// positions; with and without query compression, the latents normed (--qk-layernorm).
ModelConfig mla_config(int64_t q_lora_rank) {
  ModelConfig c = tiny_config(true);
  c.num_query_groups = c.num_attention_heads;
  c.qk_layernorm = true;
  c.mla.enabled = true;
  c.mla.q_lora_rank = q_lora_rank;
  c.mla.kv_lora_rank = 8;
  c.mla.qk_head_dim = 6;
  c.mla.qk_pos_emb_head_dim = 4;
  c.mla.v_head_dim = 12;
  c.mla.yarn = true;
  c.mla.rotary_scaling_factor = 4;
  c.mla.mscale = 0.8;
  c.mla.mscale_all_dim = 0.5;
  c.mla.original_max_position_embeddings = 8;
  return c;
}

TEST(TokenSlices, MultiLatentAttentionSlicesGiveTheWholeSequencesLossAndGradients) {
  for (int64_t q_lora_rank : {0, 12}) {
    const ModelConfig c = mla_config(q_lora_rank);
    const Step whole = run_step(c, {});
    for (const std::vector<int64_t>& slices : {std::vector<int64_t>{16, 16, 16, 16}, std::vector<int64_t>{1, 62, 1}}) {
      SCOPED_TRACE(str_cat("--q-lora-rank ", q_lora_rank, " slices ", slices.size(), " first ", slices[0]));
      const Step sliced = run_step(c, slices);
      expect_same_step(c, whole, sliced);
      // Each layer's cache: the heads' keys and values at full length, 12 columns each (as the planner prices it).
      EXPECT_EQ(layer_kv_elements(c, 2, 1), 2.0 * c.seq_length * 2 * c.num_attention_heads * 12);
      EXPECT_GE(sliced.record_bytes, c.num_layers * layer_kv_elements(c, 2, 1) * 4);
    }
  }
  // Recomputed MLA layers write and read the cache again.
  const ModelConfig c = mla_config(12);
  const Recompute r{RecomputeMethod::Uniform, 2};
  expect_same_step(c, run_step(c, {}, r), run_step(c, {8, 24, 16, 16}, r));
}

// Multi-token prediction (issue 53): the modules wait for the last slice, run over the whole sequence (each
// depth rolls it across the slices' boundaries), and hand each slice its part of the main head's
// gradient in backward; the mtp_k losses and every gradient (the modules', the shared embedding's and
// output layer's, the layers' below through each slice's head) are the unsliced step's. GPT-2 style
// (learned positions looked up at the rolled positions) and Llama style (RoPE, untied output layer).
TEST(TokenSlices, MultiTokenPredictionRunsOverTheWholeSequenceAfterTheLastSlice) {
  for (bool llama_style : {false, true}) {
    for (int64_t depths : {1, 2}) {
      ModelConfig c = tiny_config(llama_style);
      c.mtp_num_layers = depths;
      c.mtp_loss_scaling_factor = 0.3f;
      const Step whole = run_step(c, {});
      ASSERT_EQ(whole.auxiliary.size(), static_cast<size_t>(depths));
      for (const std::vector<int64_t>& slices : {std::vector<int64_t>{16, 16, 16, 16}, std::vector<int64_t>{1, 62, 1}}) {
        SCOPED_TRACE(str_cat(llama_style ? "llama" : "gpt2", " mtp ", depths, " slices ", slices.size(), " first ",
                             slices[0]));
        const Step sliced = run_step(c, slices);
        expect_same_step(c, whole, sliced);
        // After the last slice's forward the record holds the modules' record too (their logits among it).
        EXPECT_GE(sliced.record_bytes, whole.record_bytes);
      }
    }
  }
}

// Dropout is on in the comparisons above: without it the step differs.
TEST(TokenSlices, TheComparisonSeesDropout) {
  ModelConfig c = tiny_config(false);
  const Step with = run_step(c, {32, 32});
  c.hidden_dropout = c.attention_dropout = 0.0f;
  const Step without = run_step(c, {32, 32});
  EXPECT_GT(std::fabs(with.loss - without.loss), 1e-3 * std::fabs(without.loss));
}

// A slice of a micro-batch: its columns, its global positions, and the micro-batch's ids check (done on
// the host before a move to a GPU: a check per slice would be a copy back and a synchronisation each).
TEST(TokenSlices, ASliceOfAMicroBatchKeepsItsPositionsAndItsIdsCheck) {
  const ModelConfig c = tiny_config(false);
  MicroBatch mb = testing::random_batch(c, 2, 3);
  mb.sample_offset = 6;
  mb.ids_checked_below = c.vocab_size;
  const MicroBatch part = token_slice_of(mb, 40, 8);
  ASSERT_EQ(part.tokens.shape(), (Shape{2, 8}));
  EXPECT_EQ(part.ids_checked_below, c.vocab_size);
  EXPECT_EQ(part.sample_offset, 6);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 8; ++i) {
      EXPECT_EQ(part.tokens.host_i32()[b * 8 + i], mb.tokens.host_i32()[b * 64 + 40 + i]);
      EXPECT_EQ(part.labels.host_i32()[b * 8 + i], mb.labels.host_i32()[b * 64 + 40 + i]);
      EXPECT_EQ(part.loss_mask.host_f32()[b * 8 + i], mb.loss_mask.host_f32()[b * 64 + 40 + i]);
      EXPECT_EQ(part.positions.host_i32()[b * 8 + i], 40 + i);
    }
  mb.ids_checked_below = 0;
  EXPECT_EQ(token_slice_of(mb, 0, 8).ids_checked_below, 0);
}

TEST(TokenSlices, ParsesCountsAndListsAndRefusesTheRest) {
  EXPECT_EQ(parse_token_slice_lengths("4", 64), (std::vector<int64_t>{16, 16, 16, 16}));
  EXPECT_EQ(parse_token_slice_lengths("8,24,16,16", 64), (std::vector<int64_t>{8, 24, 16, 16}));
  auto error_of = [](const std::string& v) {
    try {
      parse_token_slice_lengths(v, 64);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("5").find("--pipeline-token-slices=5: 5 equal slices must divide --seq-length=64"),
            std::string::npos);
  EXPECT_NE(error_of("8,8").find("the slice lengths sum to 16, not --seq-length=64"), std::string::npos);
  EXPECT_NE(error_of("8,x").find("--pipeline-token-slices=8,x: must be"), std::string::npos);
  EXPECT_NE(error_of("0").find("--pipeline-token-slices=0"), std::string::npos);
  EXPECT_NE(error_of("auto").find("--pipeline-token-slices=auto"), std::string::npos);
}

}  // namespace
}  // namespace tessera::model
