// The mixture-of-experts layer in a whole GPT on one process: upcycling (every expert a copy of the
// dense MLP gives the dense model), finite differences of the objective with its auxiliary losses,
// capacity, shared experts, residual MoE and the pyramid's parameter counts.
#include "model/moe_layer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "core/philox.h"
#include "model/gpt_model.h"
#include "model/model_testing.h"

namespace tessera::model {
namespace {

ModelConfig dense_config(bool llama_style) {
  ModelConfig c;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_attention_heads = 4;
  c.num_query_groups = 4;
  c.kv_channels = 4;
  c.ffn_hidden_size = 24;
  c.seq_length = 6;
  c.max_position_embeddings = 8;
  c.vocab_size = 13;
  c.padded_vocab_size = 16;
  c.swiglu = llama_style;
  c.normalization = llama_style ? Normalization::RMSNorm : Normalization::LayerNorm;
  c.add_bias_linear = !llama_style;
  c.hidden_dropout = 0.1f;
  c.attention_dropout = 0.1f;
  c.init_method_std = 0.2f;
  return c;
}

ModelConfig moe_config(bool llama_style, int64_t experts = 4, int64_t topk = 2) {
  ModelConfig c = dense_config(llama_style);
  c.moe.layer_experts = {experts, experts};
  c.moe.ffn_hidden_size = c.ffn_hidden_size;
  c.moe.router.topk = topk;
  return c;
}

using testing::random_batch;

ForwardContext context(const ModelConfig& c, int64_t batch) {
  ForwardContext ctx = testing::context(c, batch, true);
  ctx.sample_offset = 0;  // the samples (and dropout masks) these tests' routing margins were chosen with
  // The micro-batch is the global batch: the losses' weight per micro-batch is 1.
  ctx.per_sample_loss_weight = 1.0 / static_cast<double>(batch);
  return ctx;
}

// The objective the backward differentiates (grad_scale 1): the summed LM loss plus each auxiliary
// loss times its coefficient, over the MoE layers (the logged values are their means over the layers).
double objective(const GptModel& model, const ModelConfig& c, const MicroBatch& mb, const ForwardContext& ctx) {
  GptActivations rec;
  LossSums losses;
  model.forward(mb, Tensor(), ctx, rec, losses);
  double j = losses.lm;
  const double layers = static_cast<double>(c.moe.num_moe_layers());
  for (const auto& [name, value] : losses.auxiliary)
    j += value * layers * (name == "z_loss" ? c.moe.z_loss_coeff : c.moe.aux_loss_coeff);
  return j;
}

// prepare: sets parameters after their initialisation (an expert bias away from 0).
void check_gradients(const ModelConfig& c, const std::vector<std::string>& must_check,
                     const std::function<void(ParameterSet&)>& prepare = {}) {
  ParameterSet params;
  GptModel model(c, params);
  params.allocate(42);
  if (prepare) prepare(params);
  const int64_t batch = 2;
  const MicroBatch mb = random_batch(c, batch, 5);
  const ForwardContext ctx = context(c, batch);
  {
    GptActivations rec;
    LossSums losses;
    model.forward(mb, Tensor(), ctx, rec, losses);
    model.backward(rec, Tensor(), ctx, 1.0f);
  }
  const std::vector<float> analytic(params.grads().f32(), params.grads().f32() + params.numel());
  float* w = params.values().f32();
  PhiloxStream pick(9, 9);
  int checked = 0;
  std::set<std::string> seen;
  for (const Parameter& p : params.params()) {
    const int64_t n = p.value.numel();
    if (!p.spec.trained()) {  // an expert bias changes only which experts are chosen: no gradient at all
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(analytic[p.offset + i], 0.0f) << p.spec.name;
      seen.insert(p.spec.name);
      continue;
    }
    for (int trial = 0; trial < std::min<int64_t>(n, 4); ++trial) {
      const int64_t i = p.offset + static_cast<int64_t>(pick.bits(checked) % n);
      const float h = 1e-2f;
      const float saved = w[i];
      w[i] = saved + h;
      const double up = objective(model, c, mb, ctx);
      w[i] = saved - h;
      const double down = objective(model, c, mb, ctx);
      w[i] = saved;
      const double numeric = (up - down) / (2 * h);
      // A perturbation that changes a routing decision makes the loss jump: such an element is skipped.
      if (std::abs(numeric - analytic[i]) > 0.05 + 0.2 * std::abs(numeric)) {
        const float small = 1e-3f;
        w[i] = saved + small;
        const double up2 = objective(model, c, mb, ctx);
        w[i] = saved - small;
        const double down2 = objective(model, c, mb, ctx);
        w[i] = saved;
        EXPECT_NEAR(analytic[i], (up2 - down2) / (2 * small), 1e-2 + 5e-2 * std::abs(numeric))
            << p.spec.name << " element " << i - p.offset;
      } else {
        EXPECT_NEAR(analytic[i], numeric, 2e-3 + 2e-2 * std::abs(numeric)) << p.spec.name << " element " << i - p.offset;
      }
      seen.insert(p.spec.name);
      ++checked;
    }
  }
  for (const std::string& name : must_check) EXPECT_TRUE(seen.count(name)) << name;
}

TEST(MoeLayer, GradientsMatchFiniteDifferencesWithAuxAndZLosses) {
  ModelConfig c = moe_config(false);
  c.moe.router.pre_softmax = true;  // the router then gets gradient from the LM loss too
  c.moe.aux_loss_coeff = 0.1f;
  c.moe.z_loss_coeff = 0.01f;
  check_gradients(c, {"decoder.layers.0.mlp.router.weight", "decoder.layers.1.mlp.experts.local_experts.3.linear_fc2.weight"});
}

TEST(MoeLayer, GradientsMatchFiniteDifferencesSwigluSeqAuxJitterAndSharedExpert) {
  ModelConfig c = moe_config(true, 4, 2);
  c.moe.load_balancing = LoadBalancing::SeqAuxLoss;
  c.moe.aux_loss_coeff = 0.1f;
  c.moe.input_jitter_eps = 0.05f;
  c.moe.shared_expert_intermediate_size = 8;
  check_gradients(c, {"decoder.layers.0.mlp.shared_experts.linear_fc1.weight"});
}

TEST(MoeLayer, GradientsMatchFiniteDifferencesWithCapacityPaddingAndSigmoid) {
  ModelConfig c = moe_config(false, 4, 2);
  c.moe.router.score = kernels::RouterScoreFunction::Sigmoid;
  c.moe.capacity_factor = 0.75;
  c.moe.pad_expert_input_to_capacity = true;
  c.moe.aux_loss_coeff = 0.1f;
  check_gradients(c, {});
}

// DeepSeek-V3's router: sigmoid scores, a nonzero expert bias, top-4 of 8 experts within 2 of 4 groups,
// the scaling factor, the sequence-level aux loss.
TEST(MoeLayer, GradientsMatchFiniteDifferencesWithExpertBiasAndGroups) {
  ModelConfig c = moe_config(true, 8, 4);
  c.moe.router.score = kernels::RouterScoreFunction::Sigmoid;
  c.moe.router.num_groups = 4;
  c.moe.router.group_topk = 2;
  c.moe.router.scaling_factor = 2.5f;
  c.moe.expert_bias = true;
  c.moe.load_balancing = LoadBalancing::SeqAuxLoss;
  c.moe.aux_loss_coeff = 0.1f;
  check_gradients(c, {"decoder.layers.0.mlp.router.weight", "decoder.layers.1.mlp.router.expert_bias"},
                  [](ParameterSet& params) {
                    for (const char* name : {"decoder.layers.0.mlp.router.expert_bias", "decoder.layers.1.mlp.router.expert_bias"}) {
                      const Parameter& b = params.get(name);
                      for (int64_t e = 0; e < b.value.numel(); ++e) b.value.f32()[e] = 0.05f * static_cast<float>(e % 3) - 0.05f;
                    }
                  });
}

TEST(MoeLayer, ResidualMoeAndPyramidGradientsMatchFiniteDifferences) {
  ModelConfig c = moe_config(false, 2, 1);
  c.moe.layer_experts = {2, 4};  // a pyramid: more experts in the last layer
  c.moe.residual = true;
  c.moe.router.pre_softmax = true;
  check_gradients(c, {"decoder.layers.1.mlp.coefficient.weight", "decoder.layers.1.mlp.residual_mlp.linear_fc1.weight",
                      "decoder.layers.1.mlp.experts.local_experts.3.linear_fc1.weight"});
}

// Upcycling: every expert a copy of the dense MLP and probabilities that sum to 1 over the chosen
// experts give the dense model's output, and the experts' gradients add up to the dense MLP's.
void check_upcycling(bool llama_style) {
  const ModelConfig dense_c = dense_config(llama_style);
  const ModelConfig moe_c = moe_config(llama_style, 4, 2);
  ParameterSet dense_params, moe_params;
  GptModel dense(dense_c, dense_params);
  GptModel moe(moe_c, moe_params);
  dense_params.allocate(42);
  moe_params.allocate(43);
  auto dense_name = [](const std::string& name) {
    const size_t at = name.find("experts.local_experts.");
    if (at == std::string::npos) return name;
    return name.substr(0, at) + name.substr(name.find('.', at + 22) + 1);
  };
  for (Parameter& p : moe_params.params())
    if (p.spec.name.find(".router.") == std::string::npos) p.value.copy_from(dense_params.get(dense_name(p.spec.name)).value);
  const int64_t batch = 2;
  const MicroBatch mb = random_batch(dense_c, batch, 5);
  const ForwardContext ctx = context(dense_c, batch);
  GptActivations dense_rec, moe_rec;
  const double dense_loss = dense.forward(mb, ctx, dense_rec);
  const double moe_loss = moe.forward(mb, ctx, moe_rec);
  EXPECT_NEAR(moe_loss, dense_loss, 1e-5 * std::abs(dense_loss));
  dense.backward(dense_rec, ctx, 0.1f);
  moe.backward(moe_rec, ctx, 0.1f);
  std::map<std::string, std::vector<double>> summed;
  for (const Parameter& p : moe_params.params()) {
    if (p.spec.name.find(".router.") != std::string::npos) {
      for (int64_t i = 0; i < p.grad.numel(); ++i) EXPECT_NEAR(p.grad.f32()[i], 0.0f, 1e-6) << p.spec.name;
      continue;
    }
    std::vector<double>& s = summed[dense_name(p.spec.name)];
    s.resize(static_cast<size_t>(p.grad.numel()));
    for (int64_t i = 0; i < p.grad.numel(); ++i) s[i] += p.grad.f32()[i];
  }
  for (const Parameter& p : dense_params.params()) {
    ASSERT_TRUE(summed.count(p.spec.name)) << p.spec.name;
    const std::vector<double>& s = summed[p.spec.name];
    for (int64_t i = 0; i < p.grad.numel(); ++i)
      ASSERT_NEAR(s[i], p.grad.f32()[i], 1e-5 + 1e-4 * std::abs(p.grad.f32()[i])) << p.spec.name << " " << i;
  }
}

TEST(MoeLayer, UpcycledExpertsGiveTheDenseModelGpt2Style) { check_upcycling(false); }
TEST(MoeLayer, UpcycledExpertsGiveTheDenseModelLlamaStyle) { check_upcycling(true); }

// --moe-grouped-gemm runs the local experts as batched products on padded rows: the same loss and
// gradients as expert by expert (to the GEMMs' summation order), in every expert form.
void check_grouped_gemm(ModelConfig c) {
  ModelConfig grouped_c = c;
  grouped_c.moe.grouped_gemm = true;
  ParameterSet params, grouped_params;
  GptModel model(c, params), grouped(grouped_c, grouped_params);
  params.allocate(42);
  grouped_params.allocate(42);
  const int64_t batch = 2;
  const MicroBatch mb = random_batch(c, batch, 5);
  const ForwardContext ctx = context(c, batch);
  GptActivations rec, grouped_rec;
  LossSums losses, grouped_losses;
  model.forward(mb, Tensor(), ctx, rec, losses);
  grouped.forward(mb, Tensor(), ctx, grouped_rec, grouped_losses);
  EXPECT_NEAR(grouped_losses.lm, losses.lm, 1e-6 * std::abs(losses.lm));
  ASSERT_EQ(grouped_losses.routing.routed, losses.routing.routed);
  model.backward(rec, Tensor(), ctx, 0.5f);
  grouped.backward(grouped_rec, Tensor(), ctx, 0.5f);
  for (const Parameter& p : params.params()) {
    const Tensor& g = grouped_params.get(p.spec.name).grad;
    double scale = 0;
    for (int64_t i = 0; i < p.grad.numel(); ++i) scale = std::max(scale, std::abs(double(p.grad.f32()[i])));
    for (int64_t i = 0; i < p.grad.numel(); ++i)
      ASSERT_NEAR(g.f32()[i], p.grad.f32()[i], 1e-5 * (scale + 1e-6)) << p.spec.name << " element " << i;
  }
}

TEST(MoeLayer, GroupedGemmGivesTheExpertByExpertLossAndGradients) {
  check_grouped_gemm(moe_config(false, 4, 2));  // GELU with biases, dropless: uneven rows per expert
  check_grouped_gemm(moe_config(true, 4, 2));   // SwiGLU without biases
  ModelConfig sparse = moe_config(false, 8, 1);  // 12 tokens over 8 experts: some get no row
  sparse.moe.layer_experts = {8, 2};
  check_grouped_gemm(sparse);
  ModelConfig capacity = moe_config(false, 4, 2);  // every expert exactly its capacity: no padding
  capacity.moe.capacity_factor = 0.75;
  capacity.moe.pad_expert_input_to_capacity = true;
  check_grouped_gemm(capacity);
  ModelConfig bf16 = moe_config(true, 4, 2);
  bf16.params_dtype = DType::BF16;
  bf16.moe.shared_expert_intermediate_size = 8;
  check_grouped_gemm(bf16);
}

TEST(MoeLayer, UniformRoutingLogsALoadBalancingLossOfOne) {
  ModelConfig c = moe_config(false, 4, 2);
  c.moe.aux_loss_coeff = 0.5f;
  ParameterSet params;
  GptModel model(c, params);
  params.allocate(42);
  for (Parameter& p : params.params())
    if (p.spec.name.find(".router.") != std::string::npos) p.value.zero_();
  const MicroBatch mb = random_batch(c, 2, 5);
  GptActivations rec;
  LossSums losses;
  // Zero router weights give uniform probabilities P_i = 1/E, and the switch loss E * sum_i P_i f_i is
  // then 1 whichever experts the ties pick (the fractions f_i sum to 1): the objective's term is the
  // coefficient exactly. The logged value is the loss without its coefficient.
  model.forward(mb, Tensor(), context(c, 2), rec, losses);
  ASSERT_EQ(losses.auxiliary.size(), 1u);
  EXPECT_EQ(losses.auxiliary[0].first, "load_balancing_loss");
  EXPECT_NEAR(losses.auxiliary[0].second, 1.0, 1e-6);
}

TEST(MoeLayer, ParameterCountMatchesTheDeclaredParametersWithEveryForm) {
  ModelConfig c = moe_config(true, 4, 2);
  c.moe.layer_experts = {0, 8};
  c.moe.ffn_hidden_size = 12;
  c.moe.shared_expert_intermediate_size = 8;
  c.moe.residual = true;
  c.moe.router.score = kernels::RouterScoreFunction::Sigmoid;
  c.moe.expert_bias = true;
  ParameterSet params;
  GptModel model(c, params);
  EXPECT_EQ(c.parameter_count(), params.numel());
  EXPECT_FALSE(params.get("decoder.layers.1.mlp.router.expert_bias").spec.trained());
  int experts = 0;
  for (const Parameter& p : params.params()) {
    if (!p.spec.expert) continue;
    EXPECT_EQ(p.spec.grad_reduce, ParameterSpec::GradReduce::ExpertDataParallel) << p.spec.name;
    EXPECT_EQ(p.spec.name.rfind("decoder.layers.1.mlp.experts.local_experts.", 0), 0u) << p.spec.name;
    ++experts;
  }
  EXPECT_EQ(experts, 8 * 2);  // fc1 and fc2 weights of each (no biases in this style)
  EXPECT_EQ(model.auxiliary_loss_names(), std::vector<std::string>{"load_balancing_loss"});
}

TEST(MoeLayer, FlopsCountTheChosenExpertsAsMegatron) {
  ModelConfig dense = dense_config(false);
  ModelConfig moe = moe_config(false, 8, 2);
  moe.moe.ffn_hidden_size = dense.ffn_hidden_size / 2;
  // Top-2 of experts half as wide: the same FLOPs as the dense MLP.
  EXPECT_DOUBLE_EQ(model_flops_per_iteration(moe, 4), model_flops_per_iteration(dense, 4));
  moe.moe.shared_expert_intermediate_size = dense.ffn_hidden_size;
  EXPECT_GT(model_flops_per_iteration(moe, 4), model_flops_per_iteration(dense, 4));
}

TEST(MoeLayer, DecodingMatchesTheFullForward) {
  ModelConfig c = moe_config(false, 4, 2);
  c.hidden_dropout = c.attention_dropout = 0;
  ParameterSet params;
  GptModel model(c, params);
  params.allocate(42);
  const MicroBatch mb = random_batch(c, 1, 5);
  ForwardContext ctx = context(c, 1);
  ctx.training = false;
  const Tensor scores = model.score(mb, Tensor(), ctx);  // [3 * seq]: label logit, lse, argmax per row
  DecodeState state = model.start_decoding(c.seq_length);
  for (int64_t t = 0; t < c.seq_length; ++t) {
    const Tensor logits = model.decode({mb.tokens.i32()[t]}, Tensor(), state);
    const float label_logit = logits.f32()[mb.labels.i32()[t]];
    EXPECT_NEAR(label_logit, scores.f32()[3 * t], 1e-4) << "position " << t;
  }
}

}  // namespace
}  // namespace tessera::model
