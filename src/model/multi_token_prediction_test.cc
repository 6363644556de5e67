// Multi-token prediction (model/multi_token_prediction.h): the modules' losses against a reference
// whose glue (rolled embedding lookup, enorm, hnorm, the concatenation and eh_proj) is computed in
// float64 here and whose layer, final norm and shared output layer are an independent one-layer GPT
// chunk holding the module's parameters; the main loss unchanged; every gradient of the objective
// against central differences; Megatron-Core's parameter names and the parameter count.
#include "model/multi_token_prediction.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "core/philox.h"
#include "kernels/tensor_ops.h"
#include "model/gpt_model.h"
#include "model/model_testing.h"

namespace tessera::model {
namespace {

using testing::context;
using testing::random_batch;

ModelConfig mtp_config(bool llama_style, int64_t mtp_layers) {
  ModelConfig c = testing::tiny_gpt_config(llama_style, 2, 6, 8);
  c.mtp_num_layers = mtp_layers;
  c.mtp_loss_scaling_factor = 0.3f;
  return c;
}

// Every parameter moved off its initial value (norm weights off 1, biases off 0), so each path counts.
void perturb(ParameterSet& params, uint64_t seed) {
  float* w = params.values().f32();
  PhiloxStream s(seed, 3);
  for (int64_t i = 0; i < params.numel(); ++i) w[i] += 0.1f * (static_cast<float>(s.bits(i) % 2001) / 1000.0f - 1.0f);
}

double objective(const ModelConfig& c, const LossSums& l) {
  double total = l.lm;
  for (const auto& [name, value] : l.auxiliary)
    if (name.rfind("mtp_", 0) == 0) total += c.mtp_loss_scaling_factor / static_cast<double>(c.mtp_num_layers) * value;
  return total;
}

double aux(const LossSums& l, const std::string& name) {
  for (const auto& [n, v] : l.auxiliary)
    if (n == name) return v;
  ADD_FAILURE() << "no loss " << name;
  return 0;
}

// The norm of `p` (prefix.weight, and prefix.bias under LayerNorm) of one row, in float64.
std::vector<double> norm_row(const ModelConfig& c, ParameterSet& params, const std::string& prefix, const double* x) {
  const int64_t h = c.hidden_size;
  const float* w = params.get(prefix + ".weight").value.f32();
  double mean = 0, var = 0;
  if (c.normalization == Normalization::LayerNorm) {
    for (int64_t j = 0; j < h; ++j) mean += x[j] / h;
    for (int64_t j = 0; j < h; ++j) var += (x[j] - mean) * (x[j] - mean) / h;
  } else {
    for (int64_t j = 0; j < h; ++j) var += x[j] * x[j] / h;
  }
  const double rstd = 1.0 / std::sqrt(var + c.norm_epsilon);
  std::vector<double> y(h);
  const float* b = c.normalization == Normalization::LayerNorm ? params.get(prefix + ".bias").value.f32() : nullptr;
  for (int64_t j = 0; j < h; ++j) y[j] = (x[j] - mean) * rstd * w[j] + (b ? b[j] : 0.0);
  return y;
}

// The sample-major tensor rolled left k times along the sequence, 0 filled (Megatron's roll_tensor).
template <typename T>
Tensor rolled(const Tensor& t, int64_t k, DType type) {
  const int64_t batch = t.dim(0), seq = t.dim(1);
  Tensor out = Tensor::zeros({batch, seq}, type, Device::cpu());
  const T* src = static_cast<const T*>(t.raw());
  T* dst = static_cast<T*>(out.raw());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s + k < seq; ++s) dst[b * seq + s] = src[b * seq + s + k];
  return out;
}

void check_against_reference(bool llama_style, int64_t depths) {
  const ModelConfig c = mtp_config(llama_style, depths);
  ParameterSet params;
  GptModel model(c, params);
  params.allocate(42);
  perturb(params, 1);
  const int64_t batch = 2, seq = c.seq_length, h = c.hidden_size, rows = batch * seq;
  const MicroBatch mb = random_batch(c, batch, 5);
  const ForwardContext ctx = context(c, batch, /*training=*/false);  // no dropout: the chunk keys it apart
  GptActivations rec;
  LossSums losses;
  model.forward(mb, Tensor(), ctx, rec, losses);

  // The main loss is the model's without MTP (the same parameters by name).
  ModelConfig plain_config = c;
  plain_config.mtp_num_layers = 0;
  ParameterSet plain_params;
  GptModel plain(plain_config, plain_params);
  plain_params.allocate(1);
  for (Parameter& p : plain_params.params()) kernels::copy(p.value, params.get(p.spec.name).value);
  GptActivations plain_rec;
  EXPECT_EQ(plain.forward(mb, ctx, plain_rec), losses.lm);
  EXPECT_EQ(model.auxiliary_loss_names(), mtp_loss_names(c));

  // One module as a one-layer chunk with no embedding: its layer, final norm and the shared output layer.
  ModelConfig chunk_config = plain_config;
  chunk_config.num_layers = 1;
  ParameterSet chunk_params;
  GptModel chunk(chunk_config, chunk_params, parallel::TensorParallelContext::single_process(),
                 ModelChunk{0, 1, /*pre_process=*/false, /*post_process=*/true});
  chunk_params.allocate(1);

  const float* words = params.get("embedding.word_embeddings.weight").value.f32();
  const float* wpe = llama_style ? nullptr : params.get("embedding.position_embeddings.weight").value.f32();
  double mask0 = 0;
  for (int64_t i = 0; i < rows; ++i) mask0 += mb.loss_mask.f32()[i];
  std::vector<double> prev(rec.final_ln.f32(), rec.final_ln.f32() + rows * h);  // h_0, [seq, batch] rows
  for (int64_t k = 1; k <= depths; ++k) {
    const std::string m = str_cat("mtp.layers.", k - 1, ".");
    for (Parameter& p : chunk_params.params()) {
      std::string name = p.spec.name;
      if (name.rfind("decoder.layers.0.", 0) == 0) name = m + "transformer_layer." + name.substr(17);
      else if (name.rfind("decoder.final_layernorm", 0) == 0) name = m + "final_layernorm" + name.substr(23);
      kernels::copy(p.value, params.get(name).value);
    }
    const Tensor tokens = rolled<int32_t>(mb.tokens, k, DType::I32);
    const float* eh = params.get(m + "eh_proj.weight").value.f32();  // [h, 2h]
    Tensor x = Tensor::empty({rows, h}, DType::F32, Device::cpu());
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t s = 0; s < seq; ++s) {
        const int64_t t = s * batch + b;
        const int32_t id = tokens.i32()[b * seq + s];
        const int64_t pos = s + k < seq ? s + k : 0;  // the rolled position ids
        std::vector<double> emb(h);
        for (int64_t j = 0; j < h; ++j) emb[j] = words[id * h + j] + (wpe ? wpe[pos * h + j] : 0.0);
        const std::vector<double> e = norm_row(c, params, m + "enorm", emb.data());
        const std::vector<double> hn = norm_row(c, params, m + "hnorm", prev.data() + t * h);
        for (int64_t o = 0; o < h; ++o) {
          double acc = 0;
          for (int64_t j = 0; j < h; ++j) acc += eh[o * 2 * h + j] * e[j] + eh[o * 2 * h + h + j] * hn[j];
          x.f32()[t * h + o] = static_cast<float>(acc);
        }
      }
    MicroBatch shifted = mb;
    shifted.labels = rolled<int32_t>(mb.labels, k, DType::I32);
    shifted.loss_mask = rolled<float>(mb.loss_mask, k, DType::F32);
    double mask_k = 0;
    for (int64_t i = 0; i < rows; ++i) mask_k += shifted.loss_mask.f32()[i];
    GptActivations chunk_rec;
    LossSums chunk_losses;
    chunk.forward(shifted, x, ctx, chunk_rec, chunk_losses);
    const double expected = chunk_losses.lm * mask0 / mask_k;
    EXPECT_NEAR(aux(losses, str_cat("mtp_", k, " loss")), expected, 2e-5 * std::abs(expected)) << "depth " << k;
    prev.assign(chunk_rec.final_ln.f32(), chunk_rec.final_ln.f32() + rows * h);
  }
}

TEST(MultiTokenPrediction, LossesMatchTheReferenceGpt2Style) { check_against_reference(false, 2); }
TEST(MultiTokenPrediction, LossesMatchTheReferenceLlamaStyle) { check_against_reference(true, 2); }

// Every gradient of the objective (LM loss + factor / N x the modules' weighted losses) against central
// differences, dropout on (its masks are keyed by coordinates, the same in the perturbed forwards).
void check_gradients(bool llama_style) {
  const ModelConfig c = mtp_config(llama_style, 2);
  ParameterSet params;
  GptModel model(c, params);
  params.allocate(42);
  perturb(params, 2);
  const int64_t batch = 2;
  const MicroBatch mb = random_batch(c, batch, 5);
  const ForwardContext ctx = context(c, batch, true);
  const float scale = 1.0f / static_cast<float>(batch * c.seq_length);
  auto loss = [&]() {
    GptActivations r;
    LossSums l;
    model.forward(mb, Tensor(), ctx, r, l);
    return objective(c, l) * scale;
  };
  {
    GptActivations rec;
    LossSums l;
    model.forward(mb, Tensor(), ctx, rec, l);
    model.backward(rec, Tensor(), ctx, scale);
  }
  std::vector<float> analytic(params.grads().f32(), params.grads().f32() + params.numel());
  float* w = params.values().f32();
  PhiloxStream pick(9, 9);
  int checked = 0, mtp_checked = 0;
  for (const Parameter& p : params.params()) {
    const int64_t n = p.value.numel();
    for (int trial = 0; trial < std::min<int64_t>(n, 5); ++trial) {
      const int64_t i = p.offset + static_cast<int64_t>(pick.bits(checked) % n);
      const float step = 1e-2f, saved = w[i];
      w[i] = saved + step;
      const double up = loss();
      w[i] = saved - step;
      const double down = loss();
      w[i] = saved;
      const double numeric = (up - down) / (2 * step);
      EXPECT_NEAR(analytic[i], numeric, 2e-4 + 2e-2 * std::abs(numeric)) << p.spec.name << " element " << i - p.offset;
      ++checked;
      if (p.spec.name.rfind("mtp.", 0) == 0) ++mtp_checked;
    }
  }
  EXPECT_GT(mtp_checked, 20);
}

TEST(MultiTokenPrediction, GradientsMatchFiniteDifferencesGpt2Style) { check_gradients(false); }
TEST(MultiTokenPrediction, GradientsMatchFiniteDifferencesLlamaStyle) { check_gradients(true); }

TEST(MultiTokenPrediction, MegatronParameterNamesAndCount) {
  for (bool llama : {false, true}) {
    const ModelConfig c = mtp_config(llama, 2);
    ParameterSet params;
    GptModel model(c, params);
    EXPECT_EQ(params.numel(), c.parameter_count());
    for (int k = 0; k < 2; ++k) {
      const std::string m = str_cat("mtp.layers.", k, ".");
      for (const char* name : {"enorm.weight", "hnorm.weight", "final_layernorm.weight",
                               "transformer_layer.input_layernorm.weight",
                               "transformer_layer.self_attention.linear_qkv.weight",
                               "transformer_layer.mlp.linear_fc2.weight"})
        EXPECT_NE(params.find(m + name), nullptr) << m << name;
      EXPECT_EQ(params.get(m + "eh_proj.weight").spec.shape, Shape({c.hidden_size, 2 * c.hidden_size}));
      EXPECT_EQ(params.find(m + "eh_proj.bias"), nullptr);
    }
  }
}

TEST(MultiTokenPrediction, ConfigurationRoundTripsThroughJson) {
  ModelConfig c = mtp_config(true, 3);
  c.num_layers = 4;
  const ModelConfig back = config_from_json(to_json(c));
  EXPECT_EQ(back.mtp_num_layers, 3);
  EXPECT_EQ(back.mtp_loss_scaling_factor, 0.3f);
  EXPECT_FALSE(to_json(mtp_config(true, 0)).contains("mtp_num_layers"));
}

// Megatron's num_floating_point_operations with MTP: each module's layer as the last, 6 x (3h + 2h^2) per
// token for its norms and eh_proj, and the logits once more.
TEST(MultiTokenPrediction, MegatronFlopsFormulaCountsTheModules) {
  for (bool llama : {false, true}) {
    const ModelConfig with = mtp_config(llama, 2), without = mtp_config(llama, 0);
    const double h = with.hidden_size, s = with.seq_length, f = with.ffn_hidden_size, v = with.padded_vocab_size;
    const double g = static_cast<double>(with.num_query_groups) / with.num_attention_heads;
    const double q = static_cast<double>(with.num_attention_heads * with.kv_channels) / h;
    const double gated = with.swiglu ? 1.5 : 1.0, batch = 3;
    const double per_token = 12 * h * h * (1 + g + s / h) * q + 12 * h * f * gated + 6 * (3 * h + 2 * h * h) + 6 * h * v;
    EXPECT_NEAR(model_flops_per_iteration(with, 3) - model_flops_per_iteration(without, 3), batch * s * 2 * per_token,
                1e-9 * batch * s * 2 * per_token);
  }
}

}  // namespace
}  // namespace tessera::model
