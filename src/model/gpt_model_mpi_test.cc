// Every tensor/sequence/data-parallel layout of the world size this binary runs at computes the same
// loss and the same gradients (gathered to full shape) as the single-process model, with dropout on.
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "comm/mpi_test_main.h"
#include "comm/parallel_state.h"
#include "core/philox.h"
#include "model/activation_memory.h"
#include "model/gpt_model.h"
#include "parallel/grad_buckets.h"

namespace tessera::model {
namespace {

struct Variant {
  const char* name;
  bool llama;  // rope + RMSNorm + SwiGLU + GQA + untied output, no biases
  bool qwen3 = false;  // and --qk-layernorm, with Llama 3.x's RoPE scaling
  bool mla = false;    // and Multi-Latent Attention (DeepSeek-V3's: compressed query, latent norms, YaRN)
  int64_t mtp = 0;     // and --mtp-num-layers (DeepSeek-V3's multi-token prediction)
};

ModelConfig config(const Variant& v) {
  ModelConfig c;
  c.num_layers = 2;
  c.hidden_size = 32;
  c.num_attention_heads = 8;
  c.num_query_groups = v.llama ? 4 : 8;
  c.kv_channels = 4;
  c.ffn_hidden_size = v.llama ? 48 : 64;
  c.seq_length = 8;
  c.max_position_embeddings = 8;
  c.vocab_size = 41;
  c.padded_vocab_size = 64;  // the same for every tp (--make-vocab-size-divisible-by chosen to match)
  c.position_embedding = v.llama ? PositionEmbedding::Rope : PositionEmbedding::LearnedAbsolute;
  c.normalization = v.llama ? Normalization::RMSNorm : Normalization::LayerNorm;
  c.swiglu = v.llama;
  c.untie_embeddings_and_output_weights = v.llama;
  c.add_bias_linear = !v.llama;
  c.hidden_dropout = 0.1f;
  c.attention_dropout = 0.1f;
  c.init_method_std = 0.1f;
  if (v.qwen3) {
    c.qk_layernorm = true;
    // A short original context, so that the scaling divides the tiny heads' low frequency.
    c.rope_scaling = RopeScaling::Llama3;
    c.rope_scaling_factor = 4;
    c.rope_original_max_position = 64;
  }
  if (v.mla) {
    c.num_query_groups = c.num_attention_heads;
    c.qk_layernorm = true;
    c.mla.enabled = true;
    c.mla.q_lora_rank = 12;
    c.mla.kv_lora_rank = 8;
    c.mla.qk_head_dim = 6;
    c.mla.qk_pos_emb_head_dim = 4;
    c.mla.v_head_dim = 10;
    c.mla.rotary_scaling_factor = 4;
    c.mla.mscale = 0.8;
    c.mla.mscale_all_dim = 0.5;
    c.mla.original_max_position_embeddings = 8;
  }
  c.mtp_num_layers = v.mtp;
  c.mtp_loss_scaling_factor = 0.3f;
  return c;
}

MicroBatch sample_batch(const ModelConfig& c, int64_t first, int64_t batch) {
  MicroBatch mb;
  mb.tokens = Tensor::empty({batch, c.seq_length}, DType::I32);
  mb.labels = Tensor::empty({batch, c.seq_length}, DType::I32);
  mb.loss_mask = Tensor::empty({batch, c.seq_length});
  for (int64_t b = 0; b < batch; ++b) {
    PhiloxStream s(77, static_cast<uint64_t>(first + b));
    for (int64_t j = 0; j < c.seq_length; ++j) {
      int64_t i = b * c.seq_length + j;
      mb.tokens.i32()[i] = static_cast<int32_t>(s.bits(2 * j) % c.vocab_size);
      mb.labels.i32()[i] = static_cast<int32_t>(s.bits(2 * j + 1) % c.vocab_size);
      mb.loss_mask.f32()[i] = j == 3 ? 0.0f : 1.0f;
    }
  }
  mb.sample_offset = first;
  return mb;
}

struct Result {
  double loss = 0;  // the objective: LM loss + the MTP losses times their factor
  std::vector<double> auxiliary;  // each auxiliary loss (the MTP modules')
  std::map<std::string, Tensor> grads;  // full shape
};

constexpr int64_t kMicroBatch = 2, kGlobalBatch = 8;

// One global batch through a model laid out over `state` (data-parallel ranks take alternate
// micro-batch slices, as Megatron's sampler), gradients reduced as the trainer does.
Result run(const ModelConfig& c, comm::ParallelState& state, bool sequence_parallel) {
  parallel::TensorParallelContext tp{&state.tensor_group(), sequence_parallel};
  ParameterSet params;
  GptModel model(c, params, tp);
  params.allocate(1234);
  const int dp = state.data_group().size(), dp_rank = state.data_group().rank();
  const int64_t micro_batches = kGlobalBatch / (kMicroBatch * dp);
  const float scale = 1.0f / static_cast<float>(kGlobalBatch * (c.seq_length - 1));  // one masked token per sample
  parallel::GradBuckets buckets(params.grads(), 1000, state.data_group());
  double loss = 0;
  std::vector<double> auxiliary(model.auxiliary_loss_names().size());
  for (int64_t m = 0; m < micro_batches; ++m) {
    MicroBatch mb = sample_batch(c, (m * dp + dp_rank) * kMicroBatch, kMicroBatch);
    ForwardContext ctx{5, 3, mb.sample_offset, true, c.seq_length, kMicroBatch};
    GptActivations rec;
    LossSums sums;
    model.forward(mb, Tensor(), ctx, rec, sums);
    loss += sums.lm;
    for (size_t i = 0; i < sums.auxiliary.size(); ++i) {
      auxiliary[i] += sums.auxiliary[i].second;
      loss += c.mtp_loss_scaling_factor / static_cast<double>(c.mtp_num_layers) * sums.auxiliary[i].second;
    }
    bool last = m + 1 == micro_batches;
    ParamHooks hooks;
    if (last) hooks.grads_final_from = [&](int64_t first) { buckets.mark_final_from(first); };
    model.backward(rec, Tensor(), ctx, scale, hooks);
  }
  buckets.finish();
  if (state.tensor_group().size() > 1)  // as the trainer: sequence shards' or the rank's heads' partial sums
    for (const Parameter& p : params.params())
      if (p.spec.sequence_parallel_grad) state.tensor_group().all_reduce(p.grad);
  Tensor total = Tensor::empty({static_cast<int64_t>(1 + auxiliary.size())});
  total.f32()[0] = static_cast<float>(loss);
  for (size_t i = 0; i < auxiliary.size(); ++i) total.f32()[1 + i] = static_cast<float>(auxiliary[i]);
  state.data_group().all_reduce(total);
  Result r;
  r.loss = total.f32()[0] * scale;
  for (size_t i = 0; i < auxiliary.size(); ++i) r.auxiliary.push_back(total.f32()[1 + i] * scale);
  for (const Parameter& p : params.params())
    r.grads[p.spec.name] = gather_full_tensor(p.spec, p.grad, state.tensor_group());
  return r;
}

class LayoutEquivalence : public ::testing::TestWithParam<Variant> {};

TEST_P(LayoutEquivalence, EveryLayoutMatchesTheSingleProcessModel) {
  const ModelConfig c = config(GetParam());
  auto single = comm::ParallelState::single_process();
  const Result reference = run(c, *single, false);

  auto world = comm::make_mpi_world_group();
  const int n = world->size();
  int layouts = 0;
  for (int tp : {1, 2, 4, 8}) {
    if (n % tp != 0 || c.num_query_groups % tp != 0 || (kGlobalBatch / kMicroBatch) % (n / tp) != 0) continue;
    comm::ParallelState state(*world, {n, tp, 1});
    for (bool sp : {false, true}) {
      if (sp && (tp == 1 || c.seq_length % tp != 0)) continue;
      SCOPED_TRACE(str_cat("tp=", tp, " dp=", n / tp, sp ? " sequence-parallel" : ""));
      Result r = run(c, state, sp);
      EXPECT_NEAR(r.loss, reference.loss, 1e-5 * std::abs(reference.loss));
      ASSERT_EQ(r.auxiliary.size(), reference.auxiliary.size());
      for (size_t i = 0; i < r.auxiliary.size(); ++i)
        EXPECT_NEAR(r.auxiliary[i], reference.auxiliary[i], 1e-5 * std::abs(reference.auxiliary[i])) << "loss " << i;
      for (const auto& [name, expected] : reference.grads) {
        const Tensor& got = r.grads.at(name);
        ASSERT_EQ(got.shape(), expected.shape()) << name;
        double scale = 0, worst = 0;
        for (int64_t i = 0; i < got.numel(); ++i) scale = std::max(scale, std::abs(double(expected.f32()[i])));
        for (int64_t i = 0; i < got.numel(); ++i)
          worst = std::max(worst, std::abs(double(got.f32()[i]) - expected.f32()[i]));
        EXPECT_LE(worst, 1e-5 * scale + 1e-9) << name << ": largest difference " << worst << " of " << scale;
      }
      ++layouts;
    }
  }
  EXPECT_GT(layouts, 0);
}

// The bytes the layer records hold after a forward match the activation-memory formulas (within 10%), and
// the rest of the record (ids, final norm, logits) matches its formula exactly, for every
// tensor/sequence-parallel layout and recomputation setting.
TEST_P(LayoutEquivalence, ActivationBytesMatchTheFormulas) {
  ModelConfig c = config(GetParam());
  c.num_layers = 4;
  auto world = comm::make_mpi_world_group();
  const int n = world->size();
  for (int tp : {1, 2, 4, 8}) {
    if (n % tp != 0 || c.num_query_groups % tp != 0) continue;
    comm::ParallelState state(*world, {n, tp, 1});
    for (bool sp : {false, true}) {
      if (sp && (tp == 1 || c.seq_length % tp != 0)) continue;
      // Mixed precision keeps the activations in 16 bits.
      const std::vector<std::pair<Recompute, DType>> cases = {
          {Recompute{}, DType::F32},  {{RecomputeMethod::Uniform, 2}, DType::F32},
          {{RecomputeMethod::Block, 1}, DType::F32}, {Recompute{}, DType::BF16},
          {{RecomputeMethod::Block, 1}, DType::F16}};
      for (const auto& [r, dtype] : cases) {
        SCOPED_TRACE(str_cat("tp=", tp, sp ? " sequence-parallel" : "", " recompute ", static_cast<int>(r.method), " ",
                             dtype_name(dtype)));
        c.params_dtype = dtype;
        parallel::TensorParallelContext ctx_tp{&state.tensor_group(), sp};
        ParameterSet params;
        GptModel model(c, params, ctx_tp);
        model.set_recompute(r);
        params.allocate(1);
        MicroBatch mb = sample_batch(c, 0, kMicroBatch);
        ForwardContext ctx{5, 3, 0, true, c.seq_length, kMicroBatch};
        GptActivations rec;
        model.forward(mb, ctx, rec);
        const double predicted = chunk_record_bytes(c, {kMicroBatch, c.seq_length, tp, sp}, c.num_layers, r);
        EXPECT_NEAR(static_cast<double>(rec.block.bytes()), predicted, 0.1 * predicted);
        // The MTP modules (their layers within 10%, as above).
        const double mtp = mtp_record_bytes(c, {kMicroBatch, c.seq_length, tp, sp});
        EXPECT_NEAR(static_cast<double>(rec.mtp.bytes()), mtp, 0.1 * mtp);
        // Beside the layers the record holds the ids and the head (logits shard above all): exactly so.
        EXPECT_EQ(static_cast<double>(rec.bytes() - rec.block.bytes() - rec.mtp.bytes()),
                  chunk_extra_bytes(c, {kMicroBatch, c.seq_length, tp, sp}, true, true));
        model.backward(rec, ctx, 1.0f);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, LayoutEquivalence,
                         ::testing::Values(Variant{"gpt2", false}, Variant{"llama", true}, Variant{"qwen3", true, true},
                                           Variant{"mla", true, false, true}, Variant{"gpt2_mtp", false, false, false, 2},
                                           Variant{"llama_mtp", true, false, false, 2}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tessera::model

