#include "model/gpt_model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/philox.h"
#include "kernels/precision.h"
#include "model/model_factory.h"
#include "model/model_testing.h"

namespace tessera::model {
namespace {

ModelConfig tiny_config(bool llama_style) { return testing::tiny_gpt_config(llama_style, 2, 6, 8); }

// Llama style with Qwen3's --qk-layernorm and Llama 3.x's RoPE scaling (a short original context, so
// that the tiny heads' low frequency is divided).
ModelConfig qwen3_config() {
  ModelConfig c = tiny_config(true);
  c.qk_layernorm = true;
  c.rope_scaling = RopeScaling::Llama3;
  c.rope_scaling_factor = 4;
  c.rope_original_max_position = 64;
  return c;
}

using testing::context;
using testing::random_batch;

// Every gradient of the whole model against central differences of its loss (dropout on: masks are a
// function of the element's coordinates, so the perturbed forwards see the same masks).
void check_gradients(bool llama_style, int64_t token_types = 0, bool qwen3 = false) {
  ModelConfig c = qwen3 ? qwen3_config() : tiny_config(llama_style);
  c.num_tokentypes = token_types;
  ParameterSet params;
  GptModel model(c, params);
  params.allocate(42);
  const int64_t batch = 2;
  MicroBatch mb = random_batch(c, batch, 5);
  if (token_types > 0) {
    EXPECT_EQ(params.get("embedding.tokentype_embeddings.weight").value.shape(), Shape({token_types, c.hidden_size}));
    mb.token_types = Tensor::empty(mb.tokens.shape(), DType::I32);
    for (int64_t i = 0; i < mb.token_types.numel(); ++i) mb.token_types.i32()[i] = static_cast<int32_t>((i / 4) % token_types);
  }
  ForwardContext ctx = context(c, batch, true);
  const float scale = 1.0f / static_cast<float>(batch * c.seq_length);

  GptActivations rec;
  model.forward(mb, ctx, rec);
  model.backward(rec, ctx, scale);
  std::vector<float> analytic(params.grads().f32(), params.grads().f32() + params.numel());

  auto loss = [&]() {
    GptActivations r;
    return model.forward(mb, ctx, r) * scale;
  };
  float* w = params.values().f32();
  PhiloxStream pick(9, 9);
  int checked = 0;
  for (const Parameter& p : params.params()) {
    // A few elements of every parameter tensor (all of small ones).
    int64_t n = p.value.numel();
    for (int trial = 0; trial < std::min<int64_t>(n, 6); ++trial) {
      int64_t i = p.offset + static_cast<int64_t>(pick.bits(checked) % n);
      const float h = 1e-2f;
      float saved = w[i];
      w[i] = saved + h;
      double up = loss();
      w[i] = saved - h;
      double down = loss();
      w[i] = saved;
      double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(analytic[i], numeric, 2e-4 + 2e-2 * std::abs(numeric))
          << p.spec.name << " element " << i - p.offset;
      ++checked;
    }
  }
  EXPECT_GT(checked, 20);
}

TEST(GptModel, GradientsMatchFiniteDifferencesGpt2Style) { check_gradients(false); }
TEST(GptModel, GradientsMatchFiniteDifferencesLlamaStyle) { check_gradients(true); }
// Token-type embeddings (BERT's segments), added to the words and positions.
TEST(GptModel, GradientsMatchFiniteDifferencesWithTokenTypes) { check_gradients(false, 2); }
// The q/k norms' weights and what flows through them.
TEST(GptModel, GradientsMatchFiniteDifferencesWithQkLayernorm) {
  check_gradients(true, 0, true);
  ParameterSet params;
  GptModel model(qwen3_config(), params);
  EXPECT_EQ(params.get("decoder.layers.0.self_attention.q_layernorm.weight").spec.shape, Shape({4}));
  EXPECT_EQ(params.get("decoder.layers.1.self_attention.k_layernorm.weight").spec.shape, Shape({4}));
}

TEST(GptModel, InitialisationDoesNotDependOnDeclarationOrder) {
  ParameterSet forward_order, reverse_order;
  std::vector<ParameterSpec> specs = {{"a.weight", {3, 5}, Init::Normal, 0.02f, true},
                                      {"b.weight", {7}, Init::Normal, 1.0f, true},
                                      {"c.bias", {4}, Init::Zeros, 0.0f, false}};
  for (const auto& s : specs) forward_order.add(s);
  for (auto it = specs.rbegin(); it != specs.rend(); ++it) reverse_order.add(*it);
  forward_order.allocate(1234);
  reverse_order.allocate(1234);
  for (const auto& s : specs) {
    const Tensor& a = forward_order.get(s.name).value;
    const Tensor& b = reverse_order.get(s.name).value;
    for (int64_t i = 0; i < a.numel(); ++i) EXPECT_EQ(a.f32()[i], b.f32()[i]) << s.name;
  }
  // A different seed gives different weights; std scales them.
  ParameterSet other;
  for (const auto& s : specs) other.add(s);
  other.allocate(1235);
  EXPECT_NE(other.get("a.weight").value.f32()[0], forward_order.get("a.weight").value.f32()[0]);
  double sq = 0;
  for (int64_t i = 0; i < 15; ++i) sq += std::pow(forward_order.get("a.weight").value.f32()[i], 2);
  EXPECT_LT(std::sqrt(sq / 15), 0.05);
}

TEST(GptModel, DropoutIsKeyedByIterationAndOffInEvaluation) {
  ModelConfig c = tiny_config(false);
  ParameterSet params;
  GptModel model(c, params);
  params.allocate(1);
  MicroBatch mb = random_batch(c, 2, 3);
  GptActivations r;
  ForwardContext ctx = context(c, 2, true);
  double a = model.forward(mb, ctx, r);
  double b = model.forward(mb, ctx, r);
  EXPECT_EQ(a, b);
  ctx.iteration += 1;
  EXPECT_NE(model.forward(mb, ctx, r), a);
  ForwardContext eval = context(c, 2, false);
  double e1 = model.forward(mb, eval, r);
  eval.iteration += 5;
  EXPECT_EQ(model.forward(mb, eval, r), e1);
}

// Feeding a sequence piece by piece through the key/value cache gives the logits of the full forward.
TEST(GptModel, IncrementalDecodingMatchesTheFullForward) {
  for (int variant : {0, 1, 2}) {  // GPT-2, Llama, Qwen3 (q/k norms, scaled RoPE)
    const bool llama = variant > 0;
    ModelConfig c = variant == 2 ? qwen3_config() : tiny_config(llama);
    ParameterSet params;
    GptModel model(c, params);
    params.allocate(3);
    MicroBatch mb = random_batch(c, 1, 11);
    GptActivations rec;
    model.forward(mb, context(c, 1, false), rec);
    DecodeState state = model.start_decoding(c.seq_length);
    std::vector<int32_t> tokens(mb.tokens.i32(), mb.tokens.i32() + c.seq_length);
    int64_t fed = 0;
    for (int64_t piece : {3, 1, 2}) {  // a prompt, then one token at a time
      std::vector<int32_t> next(tokens.begin() + fed, tokens.begin() + fed + piece);
      fed += piece;
      Tensor logits = model.next_token_logits(next, state);
      ASSERT_EQ(logits.numel(), c.padded_vocab_size);
      const float* expected = rec.logits.f32() + (fed - 1) * c.padded_vocab_size;
      for (int64_t v = 0; v < c.padded_vocab_size; ++v)
        EXPECT_NEAR(logits.f32()[v], expected[v], 1e-5f * (1 + std::abs(expected[v])))
            << (llama ? "llama" : "gpt2") << " position " << fed - 1 << " id " << v;
    }
    EXPECT_EQ(state.length, c.seq_length);
  }
}

// With document-causal attention and positions restarting per document, the second document of a
// packed sample is computed exactly as if it were a sample of its own.
TEST(GptModel, PackedDocumentsWithResetMasksEqualSeparateSamples) {
  for (bool llama : {false, true}) {
    ModelConfig c = tiny_config(llama);
    ParameterSet params;
    GptModel model(c, params);
    params.allocate(4);
    MicroBatch packed = random_batch(c, 1, 21);
    const int64_t split = 2;  // the second document starts at position 2
    packed.positions = Tensor::empty({1, c.seq_length}, DType::I32);
    packed.doc_start = Tensor::empty({1, c.seq_length}, DType::I32);
    for (int64_t j = 0; j < c.seq_length; ++j) {
      packed.positions.i32()[j] = static_cast<int32_t>(j < split ? j : j - split);
      packed.doc_start.i32()[j] = static_cast<int32_t>(j < split ? 0 : split);
    }
    GptActivations rec;
    model.forward(packed, context(c, 1, false), rec);

    ModelConfig alone_config = c;
    alone_config.seq_length = c.seq_length - split;
    MicroBatch alone;
    alone.tokens = Tensor::empty({1, alone_config.seq_length}, DType::I32);
    alone.labels = alone.tokens;
    alone.loss_mask = Tensor::zeros({1, alone_config.seq_length});
    for (int64_t j = 0; j < alone_config.seq_length; ++j) alone.tokens.i32()[j] = packed.tokens.i32()[split + j];
    GptActivations rec_alone;
    model.forward(alone, context(alone_config, 1, false), rec_alone);
    for (int64_t j = 0; j < alone_config.seq_length; ++j)
      for (int64_t v = 0; v < c.padded_vocab_size; ++v) {
        float expected = rec_alone.logits.f32()[j * c.padded_vocab_size + v];
        ASSERT_NEAR(rec.logits.f32()[(split + j) * c.padded_vocab_size + v], expected, 1e-5f * (1 + std::abs(expected)))
            << (llama ? "llama" : "gpt2") << " position " << j;
      }
  }
}

TEST(GptModel, ParameterCountMatchesTheDeclaredParameters) {
  for (bool llama : {false, true}) {
    ModelConfig c = tiny_config(llama);
    c.num_tokentypes = llama ? 0 : 2;
    ParameterSet params;
    GptModel model(c, params);
    EXPECT_EQ(params.numel(), c.parameter_count());
  }
  for (Normalization n : {Normalization::RMSNorm, Normalization::LayerNorm}) {  // with q/k norms
    ModelConfig c = qwen3_config();
    c.normalization = n;
    ParameterSet params;
    GptModel model(c, params);
    EXPECT_EQ(params.numel(), c.parameter_count());
  }
}

TEST(GptModel, MegatronFlopsFormula) {
  // GPT-2 124M at seq 1024: 12 * b * s * l * h^2 * (1 + 1 + s/h + 4 + V/(2 l h)).
  ModelConfig c;
  c.num_layers = 12;
  c.hidden_size = 768;
  c.num_attention_heads = 12;
  c.num_query_groups = 12;
  c.kv_channels = 64;
  c.ffn_hidden_size = 3072;
  c.seq_length = 1024;
  c.padded_vocab_size = 50304;
  double expected = 12.0 * 1024 * 12 * 768.0 * 768 * (2 + 1024.0 / 768 + 4 + 50304.0 / (2 * 12 * 768));
  EXPECT_NEAR(model_flops_per_iteration(c, 1), expected, expected * 1e-12);
  EXPECT_EQ(padded_vocab_size(50257, 128, 1), 50304);
  EXPECT_EQ(padded_vocab_size(50257, 128, 8), 51200);
}

}  // namespace
}  // namespace tessera::model

namespace tessera::model {
namespace {

// A model cut into pipeline chunks (each with its own parameters, as on separate ranks) computes the
// whole model's loss and gradients when the chunks pass activations forward and gradients back; the
// tied embedding's gradient is split between the first chunk and the last chunk's copy.
void check_chunks_match_whole_model(bool llama_style) {
  ModelConfig c = tiny_config(llama_style);
  c.num_layers = 3;
  ParameterSet whole_params;
  GptModel whole(c, whole_params);
  whole_params.allocate(42);
  const int64_t batch = 2;
  MicroBatch mb = random_batch(c, batch, 5);
  ForwardContext ctx = context(c, batch, true);
  GptActivations whole_rec;
  const double whole_loss = whole.forward(mb, ctx, whole_rec);
  whole.backward(whole_rec, ctx, 0.5f);

  const std::vector<ModelChunk> cuts{{0, 1, true, false}, {1, 1, false, false}, {2, 1, false, true}};
  std::vector<ParameterSet> params(cuts.size());
  // Through the model seam, as the trainer sees chunks.
  std::vector<std::unique_ptr<LanguageModelChunk>> chunks;
  std::vector<std::unique_ptr<ChunkRecord>> recs;
  for (size_t i = 0; i < cuts.size(); ++i) {
    chunks.push_back(build_model_chunk(c, params[i], parallel::TensorParallelContext::single_process(), cuts[i]));
    recs.push_back(chunks.back()->make_record());
    params[i].allocate(42);
  }
  Tensor x;
  LossSums losses;
  for (size_t i = 0; i < chunks.size(); ++i) x = chunks[i]->forward(mb, x, ctx, *recs[i], losses);
  EXPECT_FALSE(x.defined());
  EXPECT_NEAR(losses.lm, whole_loss, 1e-6 * std::abs(whole_loss));
  EXPECT_TRUE(losses.auxiliary.empty());
  Tensor dx;
  for (size_t i = chunks.size(); i-- > 0;) dx = chunks[i]->backward(*recs[i], dx, ctx, 0.5f);
  EXPECT_FALSE(dx.defined());

  // Every parameter of every chunk has the whole model's value and gradient (tied: the sum of both).
  int tied_copies = 0;
  for (ParameterSet& set : params)
    for (Parameter& p : set.params()) {
      SCOPED_TRACE(p.spec.name);
      Parameter& ref = whole_params.get(p.spec.name);
      for (int64_t i = 0; i < p.value.numel(); ++i) ASSERT_EQ(p.value.f32()[i], ref.value.f32()[i]);
      Tensor grad = p.grad.clone();
      if (p.spec.name == "embedding.word_embeddings.weight" && !c.untie_embeddings_and_output_weights) {
        Parameter& other = (p.spec.tied_copy ? params.front() : params.back()).get(p.spec.name);
        for (int64_t i = 0; i < grad.numel(); ++i) grad.f32()[i] += other.grad.f32()[i];
        tied_copies += p.spec.tied_copy;
      }
      for (int64_t i = 0; i < grad.numel(); ++i)
        ASSERT_NEAR(grad.f32()[i], ref.grad.f32()[i], 1e-5f * (std::abs(ref.grad.f32()[i]) + 1e-3f)) << i;
    }
  EXPECT_EQ(tied_copies, c.untie_embeddings_and_output_weights ? 0 : 1);

  // Incremental decoding through the chunks gives the whole model's logits, step after step.
  DecodeState whole_state = whole.start_decoding(c.seq_length);
  std::vector<DecodeState> states;
  for (auto& chunk : chunks) states.push_back(chunk->start_decoding(c.seq_length));
  for (const std::vector<int32_t>& step : {std::vector<int32_t>{1, 5, 2}, std::vector<int32_t>{7}}) {
    Tensor expected = whole.next_token_logits(step, whole_state);
    Tensor h;
    for (size_t i = 0; i < chunks.size(); ++i) h = chunks[i]->decode(step, h, states[i]);
    ASSERT_EQ(h.shape(), expected.shape());
    for (int64_t i = 0; i < h.numel(); ++i) ASSERT_EQ(h.f32()[i], expected.f32()[i]) << i;
  }
}

TEST(GptModelChunks, Gpt2StyleChunksMatchTheWholeModel) { check_chunks_match_whole_model(false); }
TEST(GptModelChunks, LlamaStyleChunksMatchTheWholeModel) { check_chunks_match_whole_model(true); }

// The tied word embedding through the seam: the first chunk's own, the last chunk's copy, one parameter
// in a chunk that is both; none in a middle chunk or where the model unties it.
TEST(GptModelChunks, TiedWordEmbeddingIsTheFirstChunksOrTheLastChunksCopy) {
  for (bool untie : {false, true}) {
    ModelConfig c = tiny_config(false);
    c.num_layers = 3;
    c.untie_embeddings_and_output_weights = untie;
    for (const ModelChunk& cut : std::vector<ModelChunk>{{0, 1, true, false}, {1, 1, false, false},
                                                         {2, 1, false, true}, {0, 3, true, true}}) {
      SCOPED_TRACE(str_cat("untie ", untie, ", chunk from layer ", cut.first_layer));
      ParameterSet params;
      const std::unique_ptr<LanguageModelChunk> chunk =
          build_model_chunk(c, params, parallel::TensorParallelContext::single_process(), cut);
      params.allocate(42);
      Parameter* v = chunk->tied_word_embedding();
      if (untie || (!cut.pre_process && !cut.post_process)) {
        EXPECT_EQ(v, nullptr);
        continue;
      }
      ASSERT_NE(v, nullptr);
      EXPECT_EQ(v, params.find("embedding.word_embeddings.weight"));
      EXPECT_EQ(v->spec.tied_copy, !cut.pre_process);
    }
  }
}

}  // namespace
}  // namespace tessera::model

namespace tessera::model {
namespace {

// Full recomputation, uniform or block, gives bit-identical losses and gradients (Philox dropout masks
// are regenerated identically) and keeps only each recomputed group's input.
TEST(GptModelRecompute, UniformAndBlockRecomputationAreExactAndKeepOnlyGroupInputs) {
  for (bool llama_style : {false, true}) {
    ModelConfig c = tiny_config(llama_style);
    c.num_layers = 4;
    const int64_t batch = 2;
    MicroBatch mb = random_batch(c, batch, 9);
    ForwardContext ctx = context(c, batch, true);
    auto run = [&](Recompute r, int64_t* layer_bytes) {
      ParameterSet params;
      GptModel model(c, params);
      model.set_recompute(r);
      params.allocate(3);
      GptActivations rec;
      double loss = model.forward(mb, ctx, rec);
      *layer_bytes = rec.block.bytes();
      model.backward(rec, ctx, 0.25f);
      std::vector<float> grads(params.grads().f32(), params.grads().f32() + params.numel());
      grads.push_back(static_cast<float>(loss));
      return grads;
    };
    int64_t stored = 0, bytes = 0;
    std::vector<float> reference = run({}, &stored);
    const int64_t input_bytes = c.seq_length * batch * c.hidden_size * 4;
    const int64_t per_layer = stored / c.num_layers;
    struct Case {
      Recompute r;
      int64_t expected_bytes;
    };
    for (const Case& k : {Case{{RecomputeMethod::Uniform, 1}, 4 * input_bytes},
                          Case{{RecomputeMethod::Uniform, 2}, 2 * input_bytes},
                          Case{{RecomputeMethod::Uniform, 3}, 2 * input_bytes},  // groups {0,1,2} {3}
                          Case{{RecomputeMethod::Block, 1}, input_bytes + 3 * per_layer},
                          Case{{RecomputeMethod::Block, 4}, 4 * input_bytes}}) {
      SCOPED_TRACE(str_cat(llama_style ? "llama " : "gpt2 ", k.r.method == RecomputeMethod::Block ? "block " : "uniform ",
                           k.r.num_layers));
      std::vector<float> got = run(k.r, &bytes);
      EXPECT_EQ(bytes, k.expected_bytes);
      ASSERT_EQ(got.size(), reference.size());
      for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], reference[i]) << "element " << i;
    }
  }
}

}  // namespace
}  // namespace tessera::model

namespace tessera::model {
namespace {

// Mixed precision: with bf16 or fp16 GEMM inputs the loss and every gradient stay close to fp32's
// (within the 16-bit types' precision), differ from them (the rounding happened), and are exactly
// reproducible, with and without recomputation.
TEST(GptModelMixedPrecision, SixteenBitGemmInputsStayCloseToFp32AndAreDeterministic) {
  for (bool llama_style : {false, true}) {
    auto run = [&](DType precision, Recompute recompute) {
      ModelConfig c = tiny_config(llama_style);
      c.params_dtype = precision;
      ParameterSet params;
      GptModel model(c, params);
      model.set_recompute(recompute);
      params.allocate(42);
      MicroBatch mb = random_batch(c, 2, 5);
      ForwardContext ctx = context(c, 2, true);
      GptActivations rec;
      double loss = model.forward(mb, ctx, rec);
      model.backward(rec, ctx, 1.0f / 12);
      return std::make_pair(loss, std::vector<float>(params.grads().f32(), params.grads().f32() + params.numel()));
    };
    const auto fp32 = run(DType::F32, {});
    for (DType t : {DType::BF16, DType::F16}) {
      const auto mixed = run(t, {});
      const double tolerance = t == DType::BF16 ? 2e-2 : 4e-3;  // a few units of 2^-8 and 2^-11
      EXPECT_NE(mixed.first, fp32.first) << dtype_name(t);
      EXPECT_NEAR(mixed.first, fp32.first, tolerance * std::abs(fp32.first)) << dtype_name(t);
      double diff = 0, norm = 0;
      for (size_t i = 0; i < fp32.second.size(); ++i) {
        diff += std::pow(static_cast<double>(mixed.second[i]) - fp32.second[i], 2);
        norm += std::pow(static_cast<double>(fp32.second[i]), 2);
      }
      EXPECT_LT(std::sqrt(diff / norm), 4 * tolerance) << dtype_name(t) << " llama_style " << llama_style;
      const auto again = run(t, {RecomputeMethod::Uniform, 1});
      EXPECT_EQ(again.first, mixed.first);
      EXPECT_EQ(again.second, mixed.second) << dtype_name(t) << ": recomputation is not exact";
    }
  }
}

// Reusing rounded GEMM inputs (weights rounded once per step, activations rounded by their producers,
// each GEMM skipping what is already rounded) gives bitwise the numbers of rounding both inputs in
// every GEMM. Two forward/backward passes with a weight update between them: the rounded weight copies
// must follow the update once weights_changed() says so.
TEST(GptModelMixedPrecision, ReusedRoundedInputsAreBitwiseTheRoundingInEveryGemm) {
  for (bool llama_style : {false, true})
    for (DType t : {DType::BF16, DType::F16}) {
      auto run = [&](bool reuse, bool announce_update) {
        kernels::set_reuse_rounded_inputs(reuse);
        ModelConfig c = tiny_config(llama_style);
        c.params_dtype = t;
        ParameterSet params;
        GptModel model(c, params);
        model.set_recompute({RecomputeMethod::Block, 1});  // the first layer recomputed, the other not
        params.allocate(42);
        params.cache_rounded_weights(t);
        std::vector<double> losses;
        for (int pass = 0; pass < 2; ++pass) {
          if (pass == 1) {  // an "optimizer step": every weight moves
            float* v = params.values().f32();
            for (int64_t i = 0; i < params.numel(); ++i) v[i] += 1e-2f * params.grads().f32()[i] + 1e-3f;
            if (announce_update) params.weights_changed();
          }
          MicroBatch mb = random_batch(c, 2, 5 + pass);
          ForwardContext ctx = context(c, 2, true);
          GptActivations rec;
          losses.push_back(model.forward(mb, ctx, rec));
          model.backward(rec, ctx, 1.0f / 12);
        }
        if (reuse) {
          EXPECT_EQ(params.rounded_weight_bytes(), params.gemm_weight_bytes());
        }
        kernels::set_reuse_rounded_inputs(true);
        return std::make_pair(losses, std::vector<float>(params.grads().f32(), params.grads().f32() + params.numel()));
      };
      const auto every_gemm = run(false, true);
      const auto reused = run(true, true);
      EXPECT_EQ(reused.first, every_gemm.first) << dtype_name(t) << " llama_style " << llama_style;
      EXPECT_EQ(reused.second, every_gemm.second) << dtype_name(t) << " llama_style " << llama_style;
      // The copies are what the GEMMs read: left stale, they give other numbers.
      const auto stale = run(true, false);
      EXPECT_EQ(stale.first[0], every_gemm.first[0]);
      EXPECT_NE(stale.first[1], every_gemm.first[1]) << dtype_name(t) << ": the rounded weights were not used";
    }
}

}  // namespace
}  // namespace tessera::model

namespace tessera::model {
namespace {

// A training forward told its backward's grad_scale (ForwardContext::loss_grad_scale, as the trainer
// sets it) computes the output layer's loss gradient with the loss, in one pass over the logits
// (kernels::cross_entropy_fused): the same loss and gradients, bit for bit, as forward then backward.
TEST(GptModelFusedLoss, FusedCrossEntropyGivesTheUnfusedLossAndGradientsBitForBit) {
  for (DType t : {DType::F32, DType::BF16}) {
    auto run = [&](bool fused) {
      ModelConfig c = tiny_config(false);
      c.params_dtype = t;
      ParameterSet params;
      GptModel model(c, params);
      params.allocate(42);
      MicroBatch mb = random_batch(c, 2, 5);
      ForwardContext ctx = context(c, 2, true);
      const float scale = 1.0f / 12;
      if (fused) ctx.loss_grad_scale = scale;
      GptActivations rec;
      const double loss = model.forward(mb, ctx, rec);
      EXPECT_EQ(rec.logits_hold_grad, fused);
      model.backward(rec, ctx, scale);
      return std::make_pair(loss, std::vector<float>(params.grads().f32(), params.grads().f32() + params.numel()));
    };
    const auto unfused = run(false), fused = run(true);
    EXPECT_EQ(fused.first, unfused.first) << dtype_name(t);
    EXPECT_EQ(fused.second, unfused.second) << dtype_name(t);
  }
}

TEST(GptModelFusedLoss, ABackwardWithAnotherGradScaleIsRefused) {
  ModelConfig c = tiny_config(false);
  ParameterSet params;
  GptModel model(c, params);
  params.allocate(42);
  MicroBatch mb = random_batch(c, 2, 5);
  ForwardContext ctx = context(c, 2, true);
  ctx.loss_grad_scale = 0.5f;
  GptActivations rec;
  model.forward(mb, ctx, rec);
  try {
    model.backward(rec, ctx, 0.25f);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("grad_scale"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera::model
