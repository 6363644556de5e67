// Multi-Latent Attention against a float64 reference written from DeepSeek-V2's definition (RoPE on
// interleaved pairs, the shared RoPE key, YaRN frequencies and mscale), and its backward against the
// reference's central differences; then a GPT of MLA layers against finite differences of its loss.
#include "model/multi_latent_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "core/philox.h"
#include "kernels/token_layout.h"
#include "model/gpt_model.h"
#include "model/model_testing.h"

namespace tessera::model {
namespace {

using Vec = std::vector<double>;

struct MlaCase {
  int64_t q_lora = 0, nope = 4, pos = 4, dv = 3;
  bool norms = false, yarn = false;
};

ModelConfig mla_config(const MlaCase& k) {
  ModelConfig c = testing::tiny_gpt_config(true, 2, 5, 8);
  c.hidden_size = 8;
  c.num_attention_heads = c.num_query_groups = 2;
  c.kv_channels = 4;
  c.add_bias_linear = true;  // linear_proj's bias
  c.qk_layernorm = k.norms;
  c.init_method_std = 0.4f;
  c.mla.enabled = true;
  c.mla.q_lora_rank = k.q_lora;
  c.mla.kv_lora_rank = 3;
  c.mla.qk_head_dim = k.nope;
  c.mla.qk_pos_emb_head_dim = k.pos;
  c.mla.v_head_dim = k.dv;
  c.mla.yarn = k.yarn;
  if (k.yarn) {  // a short original context, so that the ramp divides some of the tiny head's frequencies
    c.mla.rotary_scaling_factor = 4;
    c.mla.mscale = 0.9;
    c.mla.mscale_all_dim = 0.6;
    c.mla.original_max_position_embeddings = 8;
    c.rotary_base = 100;
  }
  return c;
}

// DeepSeek's YaRN, written from Megatron's yarn_rotary_pos_embedding.py formulas.
double ref_mscale(double factor, double m) { return factor <= 1 ? 1.0 : 0.1 * m * std::log(factor) + 1.0; }
double ref_inv_freq(const ModelConfig& c, int64_t i) {
  const MlaConfig& m = c.mla;
  const double dim = static_cast<double>(m.qk_pos_emb_head_dim), base = c.rotary_base;
  const double extra = 1.0 / std::pow(base, 2.0 * static_cast<double>(i) / dim);
  if (!m.yarn) return extra;
  auto corr = [&](double turns) {
    return dim * std::log(static_cast<double>(m.original_max_position_embeddings) / (turns * 2 * M_PI)) /
           (2 * std::log(base));
  };
  double low = std::max(std::floor(corr(m.beta_fast)), 0.0), high = std::min(std::ceil(corr(m.beta_slow)), dim - 1);
  if (low == high) high += 0.001;
  const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
  const double keep = 1.0 - ramp;
  return extra / m.rotary_scaling_factor * (1 - keep) + extra * keep;
}

// y = x W^T for W [out, in] flat.
Vec matmul_t(const Vec& x, const Vec& w, int64_t rows, int64_t in, int64_t out) {
  Vec y(rows * out, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) y[r * out + o] += x[r * in + i] * w[o * in + i];
  return y;
}

Vec rms_norm(const Vec& x, const Vec& w, int64_t rows, int64_t width, double eps) {
  Vec y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t j = 0; j < width; ++j) ss += x[r * width + j] * x[r * width + j];
    const double rstd = 1.0 / std::sqrt(ss / static_cast<double>(width) + eps);
    for (int64_t j = 0; j < width; ++j) y[r * width + j] = x[r * width + j] * rstd * w[j];
  }
  return y;
}

// The pairs (2i, 2i + 1) of v[0, pos) rotated by position * inv_freq(i), times YaRN's mscale.
void ref_rotate(const ModelConfig& c, double* v, int64_t position) {
  const MlaConfig& m = c.mla;
  const double ms = m.yarn ? ref_mscale(m.rotary_scaling_factor, m.mscale) / ref_mscale(m.rotary_scaling_factor, m.mscale_all_dim) : 1.0;
  for (int64_t i = 0; i < m.qk_pos_emb_head_dim / 2; ++i) {
    const double angle = static_cast<double>(position) * ref_inv_freq(c, i);
    const double a = v[2 * i], b = v[2 * i + 1];
    v[2 * i] = (a * std::cos(angle) - b * std::sin(angle)) * ms;
    v[2 * i + 1] = (b * std::cos(angle) + a * std::sin(angle)) * ms;
  }
}

// The layer's output [T, hidden] for input x [T, hidden] (rows t = s * batch + b), weights by name.
Vec reference(const ModelConfig& c, const std::map<std::string, Vec>& w, const Vec& x, int64_t seq, int64_t batch) {
  const MlaConfig& m = c.mla;
  const int64_t T = seq * batch, h = c.hidden_size, H = c.num_attention_heads, dq = m.q_head_dim();
  const int64_t nope = m.qk_head_dim, pos = m.qk_pos_emb_head_dim, dv = m.v_head_dim, kr = m.kv_lora_rank;
  const std::string p = "decoder.layers.0.self_attention.";
  Vec q;
  if (m.q_lora_rank > 0) {
    Vec cq = matmul_t(x, w.at(p + "linear_q_down_proj.weight"), T, h, m.q_lora_rank);
    if (c.qk_layernorm) cq = rms_norm(cq, w.at(p + "q_layernorm.weight"), T, m.q_lora_rank, c.norm_epsilon);
    q = matmul_t(cq, w.at(p + "linear_q_up_proj.weight"), T, m.q_lora_rank, H * dq);
  } else {
    q = matmul_t(x, w.at(p + "linear_q_proj.weight"), T, h, H * dq);
  }
  const Vec ckv = matmul_t(x, w.at(p + "linear_kv_down_proj.weight"), T, h, kr + pos);
  Vec lat(T * kr), kpe(T * pos);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < kr; ++j) lat[t * kr + j] = ckv[t * (kr + pos) + j];
    for (int64_t j = 0; j < pos; ++j) kpe[t * pos + j] = ckv[t * (kr + pos) + kr + j];
    ref_rotate(c, &kpe[t * pos], t / batch);
  }
  if (c.qk_layernorm) lat = rms_norm(lat, w.at(p + "kv_layernorm.weight"), T, kr, c.norm_epsilon);
  const Vec kv = matmul_t(lat, w.at(p + "linear_kv_up_proj.weight"), T, kr, H * (nope + dv));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t hd = 0; hd < H; ++hd) ref_rotate(c, &q[(t * H + hd) * dq + nope], t / batch);
  const double ms = m.yarn ? ref_mscale(m.rotary_scaling_factor, m.mscale_all_dim) : 1.0;
  const double scale = ms * ms / std::sqrt(static_cast<double>(dq));
  Vec out(T * H * dv, 0.0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t hd = 0; hd < H; ++hd)
      for (int64_t i = 0; i < seq; ++i) {
        const int64_t ti = i * batch + b;
        Vec s(i + 1);
        double mx = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          const int64_t tj = j * batch + b;
          double dot = 0;
          for (int64_t e = 0; e < nope; ++e) dot += q[(ti * H + hd) * dq + e] * kv[(tj * H + hd) * (nope + dv) + e];
          for (int64_t e = 0; e < pos; ++e) dot += q[(ti * H + hd) * dq + nope + e] * kpe[tj * pos + e];
          s[j] = dot * scale;
          mx = std::max(mx, s[j]);
        }
        double z = 0;
        for (double& v : s) z += (v = std::exp(v - mx));
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t e = 0; e < dv; ++e)
            out[(ti * H + hd) * dv + e] += s[j] / z * kv[((j * batch + b) * H + hd) * (nope + dv) + nope + e];
      }
  Vec y = matmul_t(out, w.at(p + "linear_proj.weight"), T, H * dv, h);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < h; ++j) y[t * h + j] += w.at(p + "linear_proj.bias")[j];
  return y;
}

Vec host(const Tensor& t) { return Vec(t.f32(), t.f32() + t.numel()); }

// Forward against the reference, and every parameter's and the input's gradient of sum(y * R) against
// the reference's central differences.
void check_layer(const MlaCase& k) {
  const ModelConfig c = mla_config(k);
  const int64_t seq = c.seq_length, batch = 2, T = seq * batch;
  ParameterSet params;
  MultiLatentAttention mla(c, 1, "decoder.layers.0.self_attention.", params,
                           parallel::TensorParallelContext::single_process());
  params.allocate(11);
  Tensor x = Tensor::empty({T, c.hidden_size}), R = Tensor::empty({T, c.hidden_size});
  PhiloxStream s(3, 4);
  for (int64_t i = 0; i < x.numel(); ++i) {
    x.f32()[i] = static_cast<float>(s.normal(2 * i));
    R.f32()[i] = static_cast<float>(s.normal(2 * i + 1));
  }
  Tensor positions = Tensor::empty({T}, DType::I32);
  kernels::fill_positions(positions, batch);
  ForwardContext ctx = testing::context(c, batch, false);
  const SublayerContext sc{ctx, positions};
  auto rec = mla.make_record();
  const Tensor y = mla.forward(x, false, sc, *rec);
  const Tensor dx = mla.backward(R, x, false, sc, *rec, false);

  std::map<std::string, Vec> w;
  for (const Parameter& p : params.params()) w[p.spec.name] = host(p.value);
  const Vec xd = host(x), Rd = host(R);
  const Vec yref = reference(c, w, xd, seq, batch);
  for (int64_t i = 0; i < T * c.hidden_size; ++i)
    ASSERT_NEAR(y.f32()[i], yref[i], 1e-5 + 1e-5 * std::abs(yref[i])) << "output " << i;

  const auto objective = [&](const std::map<std::string, Vec>& ww, const Vec& xx) {
    const Vec yy = reference(c, ww, xx, seq, batch);
    double sum = 0;
    for (size_t i = 0; i < yy.size(); ++i) sum += yy[i] * Rd[i];
    return sum;
  };
  const double hstep = 1e-6;
  const auto check = [&](const std::string& what, float analytic, double up, double down) {
    const double numeric = (up - down) / (2 * hstep);
    EXPECT_NEAR(analytic, numeric, 1e-4 + 1e-4 * std::abs(numeric)) << what;
  };
  int checked = 0;
  for (const Parameter& p : params.params()) {
    for (int64_t i = 0; i < p.value.numel(); ++i, ++checked) {
      auto ww = w;
      ww[p.spec.name][i] += hstep;
      const double up = objective(ww, xd);
      ww[p.spec.name][i] -= 2 * hstep;
      check(p.spec.name + " element " + std::to_string(i), p.grad.f32()[i], up, objective(ww, xd));
    }
  }
  for (int64_t i = 0; i < x.numel(); ++i) {
    Vec xx = xd;
    xx[i] += hstep;
    const double up = objective(w, xx);
    xx[i] -= 2 * hstep;
    check("input element " + std::to_string(i), dx.f32()[i], up, objective(w, xx));
  }
  EXPECT_GT(checked, 100);
}

TEST(MultiLatentAttention, NoQueryCompressionMatchesTheReference) { check_layer({0, 4, 4, 3, false, false}); }
TEST(MultiLatentAttention, CompressedQueryWithLatentNormsMatchesTheReference) { check_layer({5, 4, 4, 3, true, false}); }
TEST(MultiLatentAttention, ValueHeadsWiderThanQueryHeadsMatchTheReference) { check_layer({5, 2, 2, 6, true, false}); }
TEST(MultiLatentAttention, YarnMatchesTheReference) { check_layer({5, 4, 4, 3, true, true}); }

TEST(MultiLatentAttention, ParameterNamesAreMegatronCores) {
  ParameterSet params;
  GptModel model(mla_config({5, 4, 4, 3, true, false}), params);
  for (const char* name : {"linear_q_down_proj.weight", "q_layernorm.weight", "linear_q_up_proj.weight",
                           "linear_kv_down_proj.weight", "kv_layernorm.weight", "linear_kv_up_proj.weight",
                           "linear_proj.weight", "linear_proj.bias"})
    EXPECT_NO_THROW(params.get(std::string("decoder.layers.1.self_attention.") + name)) << name;
  EXPECT_EQ(params.get("decoder.layers.0.self_attention.linear_kv_down_proj.weight").spec.shape, Shape({3 + 4, 8}));
  EXPECT_EQ(params.get("decoder.layers.0.self_attention.linear_kv_up_proj.weight").spec.shape, Shape({2 * (4 + 3), 3}));
  ParameterSet lite;
  GptModel v2_lite(mla_config({0, 4, 4, 3, false, false}), lite);
  EXPECT_EQ(lite.get("decoder.layers.0.self_attention.linear_q_proj.weight").spec.shape, Shape({2 * 8, 8}));
}

TEST(MultiLatentAttention, ParameterCountMatchesTheDeclaredParameters) {
  for (const MlaCase& k : {MlaCase{0, 4, 4, 3, false, false}, MlaCase{5, 4, 4, 3, true, true}}) {
    for (Normalization n : {Normalization::RMSNorm, Normalization::LayerNorm}) {
      ModelConfig c = mla_config(k);
      c.normalization = n;
      ParameterSet params;
      GptModel model(c, params);
      EXPECT_EQ(params.numel(), c.parameter_count());
    }
  }
}

TEST(MultiLatentAttention, ConfigurationRoundTripsThroughJson) {
  const ModelConfig c = mla_config({5, 4, 4, 3, true, true});
  const ModelConfig back = config_from_json(to_json(c));
  EXPECT_EQ(to_json(back), to_json(c));
  EXPECT_TRUE(back.mla.enabled && back.mla.yarn);
  EXPECT_EQ(back.mla.q_lora_rank, 5);
  nlohmann::json bad = to_json(c);
  bad["mla"]["qk_pos_emb_head_dim"] = 3;
  EXPECT_THROW(config_from_json(bad), Error);
}

// Megatron's MLA FLOPs (training.py's num_floating_point_operations, without the causal halving, as
// Tessera's dense form) worked by hand for the tiny model: per token and layer 6 x (q: 5 x (8 + 2 x 8 + 1),
// kv: 3 x (8 + 2 x 7 + 1), RoPE key: 8 x 4, out: 2 x 3 x 8) + 6 x 2 x (8 + 3) x 5 = 2304; the SwiGLU MLP
// of both layers and the logits 12 x 64 x (2 x 24 / 8 x 1.5 + 16 / 16) = 7680; over 5 tokens: 5 x (2 x 2304 + 7680).
TEST(MultiLatentAttention, MegatronFlopsFormula) {
  EXPECT_DOUBLE_EQ(model_flops_per_iteration(mla_config({5, 4, 4, 3, true, false}), 1), 5.0 * (2 * 2304 + 7680));
}

// The whole model's gradients against central differences of its loss, dropout on.
TEST(MultiLatentAttention, GptGradientsMatchFiniteDifferences) {
  ModelConfig c = mla_config({5, 4, 4, 3, true, true});
  c.init_method_std = 0.2f;  // as the GPT tests': central differences of step 1e-2 stay within tolerance
  ParameterSet params;
  GptModel model(c, params);
  params.allocate(42);
  const int64_t batch = 2;
  MicroBatch mb = testing::random_batch(c, batch, 5);
  ForwardContext ctx = testing::context(c, batch, true);
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
    const int64_t n = p.value.numel();
    for (int trial = 0; trial < std::min<int64_t>(n, 3); ++trial, ++checked) {
      const int64_t i = p.offset + static_cast<int64_t>(pick.bits(checked) % n);
      const float h = 1e-2f, saved = w[i];
      w[i] = saved + h;
      const double up = loss();
      w[i] = saved - h;
      const double down = loss();
      w[i] = saved;
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(analytic[i], numeric, 2e-4 + 2e-2 * std::abs(numeric)) << p.spec.name << " element " << i - p.offset;
    }
  }
  EXPECT_GT(checked, 40);
}

}  // namespace
}  // namespace tessera::model
