#include "model/transformer_layer.h"

#include <cmath>

#include "kernels/activations.h"
#include "kernels/attention.h"
#include "kernels/decode_attention.h"
#include "kernels/dropout.h"
#include "kernels/precision.h"
#include "kernels/rotary.h"

namespace tessera::model {
namespace {

std::string layer_prefix(int64_t layer_number) {
  return str_cat("decoder.layers.", layer_number - 1, ".");
}

// The fused QKV projection's rows are grouped as Megatron lays them out: for each query group, its
// query heads, then its key head, then its value head. Splitting the weight by groups is then a
// contiguous split, which is what tensor parallelism needs.
void split_qkv(const float* qkv, float* q, float* k, float* v, int64_t rows, int64_t groups, int64_t per_group,
               int64_t d) {
  int64_t row_width = groups * (per_group + 2) * d;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < rows; ++t) {
    const float* src = qkv + t * row_width;
    for (int64_t g = 0; g < groups; ++g) {
      const float* group = src + g * (per_group + 2) * d;
      for (int64_t j = 0; j < per_group * d; ++j) q[(t * groups * per_group + g * per_group) * d + j] = group[j];
      for (int64_t j = 0; j < d; ++j) k[(t * groups + g) * d + j] = group[per_group * d + j];
      for (int64_t j = 0; j < d; ++j) v[(t * groups + g) * d + j] = group[(per_group + 1) * d + j];
    }
  }
}

void merge_qkv(const float* q, const float* k, const float* v, float* qkv, int64_t rows, int64_t groups,
               int64_t per_group, int64_t d) {
  int64_t row_width = groups * (per_group + 2) * d;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < rows; ++t) {
    float* dst = qkv + t * row_width;
    for (int64_t g = 0; g < groups; ++g) {
      float* group = dst + g * (per_group + 2) * d;
      for (int64_t j = 0; j < per_group * d; ++j) group[j] = q[(t * groups * per_group + g * per_group) * d + j];
      for (int64_t j = 0; j < d; ++j) group[per_group * d + j] = k[(t * groups + g) * d + j];
      for (int64_t j = 0; j < d; ++j) group[(per_group + 1) * d + j] = v[(t * groups + g) * d + j];
    }
  }
}

void add_into(const Tensor& dst, const Tensor& src) {
  float* a = dst.f32();
  const float* b = src.f32();
  int64_t n = dst.numel();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) a[i] += b[i];
}

}  // namespace

namespace {
// Output projections start smaller, std / sqrt(2 * layers), as Megatron's scaled_init_method_normal.
float output_init_std(const ModelConfig& c) {
  return c.init_method_std / std::sqrt(2.0f * static_cast<float>(c.num_layers));
}
}  // namespace

TransformerLayer::TransformerLayer(const ModelConfig& config, int64_t layer_number, ParameterSet& params,
                                   const parallel::TensorParallelContext& tp)
    : config_(config),
      layer_number_(layer_number),
      tp_(tp),
      heads_(config.num_attention_heads / tp.size()),
      groups_(config.num_query_groups / tp.size()),
      input_norm_(params, layer_prefix(layer_number) + "input_layernorm", config, tp.sequence_parallel),
      pre_mlp_norm_(params, layer_prefix(layer_number) + "pre_mlp_layernorm", config, tp.sequence_parallel),
      // Split by query groups: each rank holds whole groups (their query heads, key and value).
      qkv_(params, layer_prefix(layer_number) + "self_attention.linear_qkv", config.hidden_size,
           {config.num_query_groups, (config.query_heads_per_group() + 2) * config.kv_channels}, 0,
           config.add_bias_linear, config.init_method_std, tp, config.params_dtype),
      proj_(params, layer_prefix(layer_number) + "self_attention.linear_proj",
            config.num_attention_heads * config.kv_channels, config.hidden_size, config.add_bias_linear,
            output_init_std(config), tp, config.params_dtype),
      // SwiGLU's fc1 is [gate; up]: each rank takes the same columns of both halves.
      fc1_(params, layer_prefix(layer_number) + "mlp.linear_fc1", config.hidden_size,
           config.swiglu ? Shape{2, config.ffn_hidden_size} : Shape{config.ffn_hidden_size}, config.swiglu ? 1 : 0,
           config.add_bias_linear, config.init_method_std, tp, config.params_dtype),
      fc2_(params, layer_prefix(layer_number) + "mlp.linear_fc2", config.ffn_hidden_size, config.hidden_size,
           config.add_bias_linear, output_init_std(config), tp, config.params_dtype) {}

void TransformerLayer::hidden_dropout(const Tensor& x, const ForwardContext& ctx, int site, bool backward) const {
  if (!ctx.training || config_.hidden_dropout == 0.0f) return;
  kernels::DropoutRegion region = residual_region(ctx, config_.hidden_size, tp_);
  uint64_t stream = dropout_stream(ctx.iteration, layer_number_, site);
  if (backward)
    kernels::dropout_backward(x.f32(), x.f32(), config_.hidden_dropout, ctx.seed, stream, region);
  else
    kernels::dropout_forward(x.f32(), x.f32(), config_.hidden_dropout, ctx.seed, stream, region);
}

void LayerActivations::store_activations_as(DType t) {
  kernels::store_all_as(t, {&input, &ln1, &q, &k, &v, &attn, &residual, &ln2, &fc1, &act});
}

LayerActivations LayerActivations::with_fp32_activations() const {
  LayerActivations r = *this;
  kernels::all_to_fp32({&r.input, &r.ln1, &r.q, &r.k, &r.v, &r.attn, &r.residual, &r.ln2, &r.fc1, &r.act});
  return r;
}

int64_t LayerActivations::bytes() const {
  int64_t total = 0;
  for (const Tensor* t : {&input, &ln1, &ln1_mean, &ln1_rstd, &q, &k, &v, &attn, &lse, &residual, &ln2, &ln2_mean,
                          &ln2_rstd, &fc1, &act})
    if (t->defined()) total += static_cast<int64_t>(t->nbytes());
  return total;
}

namespace {
// Under mixed precision attention multiplies 16-bit q, k, v and output gradients, as the GEMMs do.
void round_for_attention(DType t, const Tensor& x) {
  if (t != DType::F32) kernels::round_to(t, x.f32(), x.f32(), x.numel());
}

kernels::AttentionShape attention_shape(const ForwardContext& ctx, int64_t heads, int64_t groups, int64_t d) {
  return {ctx.seq, ctx.batch, heads, groups, d, ctx.doc_start};
}
// Keyed by global head index, so a rank's heads draw the masks they would in a single process.
kernels::AttentionDropout attention_dropout(const ModelConfig& c, const ForwardContext& ctx, int64_t layer_number,
                                            int site, int64_t head_offset) {
  kernels::AttentionDropout d;
  d.p = ctx.training ? c.attention_dropout : 0.0f;
  d.seed = ctx.seed;
  d.stream = dropout_stream(ctx.iteration, layer_number, site);
  d.sample_offset = ctx.sample_offset;
  d.head_offset = head_offset;
  d.total_heads = c.num_attention_heads;
  return d;
}
}  // namespace

Tensor TransformerLayer::forward(const Tensor& x, const int32_t* positions, const ForwardContext& ctx,
                                 LayerActivations& rec) const {
  const ModelConfig& c = config_;
  const int64_t rows = ctx.seq * ctx.batch, d = c.kv_channels;  // attention sees every token
  rec.input = x;

  // Attention block.
  // The norms' outputs, attention's output and the activation feed only GEMMs here (and are kept in
  // 16 bits for backward), so they are rounded where they are made instead of in the GEMM.
  const DType rounding = kernels::gemm_rounding(c.params_dtype);
  const bool rounded = rounding != DType::F32;
  input_norm_.forward(x, rec.ln1, rec.ln1_mean, rec.ln1_rstd, rounding);
  Tensor qkv = qkv_.forward(rec.ln1, rounded);
  rec.q = Tensor::empty({rows, heads_, d});
  rec.k = Tensor::empty({rows, groups_, d});
  rec.v = Tensor::empty({rows, groups_, d});
  split_qkv(qkv.f32(), rec.q.f32(), rec.k.f32(), rec.v.f32(), rows, groups_, c.query_heads_per_group(), d);
  qkv = Tensor();
  if (c.position_embedding == PositionEmbedding::Rope) {
    kernels::rope_forward(rec.q.f32(), positions, rows, heads_, d, c.rotary_dim(), c.rotary_base);
    kernels::rope_forward(rec.k.f32(), positions, rows, groups_, d, c.rotary_dim(), c.rotary_base);
  }
  for (const Tensor* t : {&rec.q, &rec.k, &rec.v}) round_for_attention(c.params_dtype, *t);
  rec.attn = Tensor::empty({rows, heads_ * d});
  rec.lse = Tensor::empty({ctx.batch, heads_, ctx.seq});
  kernels::attention_forward(rec.q.f32(), rec.k.f32(), rec.v.f32(), rec.attn.f32(), rec.lse.f32(),
                             attention_shape(ctx, heads_, groups_, d), 1.0f / std::sqrt(static_cast<float>(d)),
                             attention_dropout(c, ctx, layer_number_, kAttentionProbs, tp_.rank() * heads_));
  Tensor h = proj_.forward(rec.attn, kernels::round_in_place_for_gemm(c.params_dtype, rec.attn));
  hidden_dropout(h, ctx, kAttentionOutput, false);
  add_into(h, x);
  rec.residual = h;

  // MLP block.
  pre_mlp_norm_.forward(h, rec.ln2, rec.ln2_mean, rec.ln2_rstd, rounding);
  rec.fc1 = fc1_.forward(rec.ln2, rounded);
  const int64_t ffn = c.ffn_hidden_size / tp_.size();
  rec.act = Tensor::empty({rows, ffn});
  if (c.swiglu)
    kernels::swiglu_forward(rec.fc1.f32(), rec.act.f32(), rows, ffn, rounding);
  else
    kernels::gelu_forward(rec.fc1.f32(), rec.act.f32(), rec.act.numel(), rounding);
  Tensor y = fc2_.forward(rec.act, rounded);
  hidden_dropout(y, ctx, kMlpOutput, false);
  add_into(y, h);
  rec.store_activations_as(c.params_dtype);
  return y;
}

Tensor TransformerLayer::backward(const Tensor& dy, const int32_t* positions, const ForwardContext& ctx,
                                  const LayerActivations& stored) const {
  const ModelConfig& c = config_;
  const LayerActivations rec = stored.with_fp32_activations();  // this layer's only, while it runs
  const int64_t rows = ctx.seq * ctx.batch, d = c.kv_channels;
  // Activations widened from 16-bit storage hold 16-bit values already: their GEMMs need not round them.
  auto widened = [&](const Tensor& kept) { return kept.dtype() != DType::F32 && kept.dtype() == c.params_dtype; };

  // MLP block: dh starts as the residual path's gradient dy.
  Tensor dh = dy.clone();
  Tensor dfc2 = dy.clone();
  hidden_dropout(dfc2, ctx, kMlpOutput, true);
  Tensor dact = fc2_.backward(dfc2, rec.act, widened(stored.act));
  dfc2 = Tensor();
  Tensor dfc1 = Tensor::empty(rec.fc1.shape());
  if (c.swiglu)
    kernels::swiglu_backward(rec.fc1.f32(), dact.f32(), dfc1.f32(), rows, c.ffn_hidden_size / tp_.size());
  else
    kernels::gelu_backward(rec.fc1.f32(), dact.f32(), dfc1.f32(), dfc1.numel());
  dact = Tensor();
  Tensor dln2 = fc1_.backward(dfc1, rec.ln2, widened(stored.ln2));
  dfc1 = Tensor();
  pre_mlp_norm_.backward(dln2, rec.residual, rec.ln2_mean, rec.ln2_rstd, dh);
  dln2 = Tensor();

  // Attention block: dx starts as the residual path's gradient dh.
  Tensor dproj = dh.clone();
  hidden_dropout(dproj, ctx, kAttentionOutput, true);
  Tensor dattn = proj_.backward(dproj, rec.attn, widened(stored.attn));
  dproj = Tensor();
  round_for_attention(c.params_dtype, dattn);
  Tensor dq = Tensor::empty(rec.q.shape()), dk = Tensor::empty(rec.k.shape()), dv = Tensor::empty(rec.v.shape());
  kernels::attention_backward(rec.q.f32(), rec.k.f32(), rec.v.f32(), rec.attn.f32(), rec.lse.f32(), dattn.f32(),
                              dq.f32(), dk.f32(), dv.f32(), attention_shape(ctx, heads_, groups_, d),
                              1.0f / std::sqrt(static_cast<float>(d)),
                              attention_dropout(c, ctx, layer_number_, kAttentionProbs, tp_.rank() * heads_));
  dattn = Tensor();
  if (c.position_embedding == PositionEmbedding::Rope) {
    kernels::rope_backward(dq.f32(), positions, rows, heads_, d, c.rotary_dim(), c.rotary_base);
    kernels::rope_backward(dk.f32(), positions, rows, groups_, d, c.rotary_dim(), c.rotary_base);
  }
  Tensor dqkv = Tensor::empty({rows, c.qkv_size() / tp_.size()});
  merge_qkv(dq.f32(), dk.f32(), dv.f32(), dqkv.f32(), rows, groups_, c.query_heads_per_group(), d);
  dq = dk = dv = Tensor();
  Tensor dln1 = qkv_.backward(dqkv, rec.ln1, widened(stored.ln1));
  dqkv = Tensor();
  Tensor dx = dh;
  input_norm_.backward(dln1, rec.input, rec.ln1_mean, rec.ln1_rstd, dx);
  return dx;
}

KvCache TransformerLayer::make_kv_cache(int64_t capacity) const {
  return {Tensor::empty({capacity, groups_, config_.kv_channels}), Tensor::empty({capacity, groups_, config_.kv_channels})};
}

Tensor TransformerLayer::forward_incremental(const Tensor& x, const int32_t* positions, int64_t past,
                                             KvCache& cache) const {
  const ModelConfig& c = config_;
  const int64_t n = x.dim(0), d = c.kv_channels;
  TESSERA_CHECK(!tp_.sequence_parallel, "incremental decoding needs a model built without sequence parallelism");
  TESSERA_CHECK(past + n <= cache.k.dim(0), "key/value cache of ", cache.k.dim(0), " positions cannot hold ",
                past + n);
  Tensor ln, mean, rstd;
  input_norm_.forward(x, ln, mean, rstd);
  Tensor qkv = qkv_.forward(ln);
  Tensor q = Tensor::empty({n, heads_, d});
  Tensor k = cache.k.narrow(past, n), v = cache.v.narrow(past, n);
  split_qkv(qkv.f32(), q.f32(), k.f32(), v.f32(), n, groups_, c.query_heads_per_group(), d);
  if (c.position_embedding == PositionEmbedding::Rope) {
    kernels::rope_forward(q.f32(), positions, n, heads_, d, c.rotary_dim(), c.rotary_base);
    kernels::rope_forward(k.f32(), positions, n, groups_, d, c.rotary_dim(), c.rotary_base);
  }
  for (const Tensor* t : {&q, &k, &v}) round_for_attention(c.params_dtype, *t);
  Tensor attn = Tensor::empty({n, heads_ * d});
  kernels::attention_decode(q.f32(), cache.k.f32(), cache.v.f32(), attn.f32(), n, past, heads_, groups_, d,
                            1.0f / std::sqrt(static_cast<float>(d)));
  Tensor h = proj_.forward(attn);
  add_into(h, x);
  pre_mlp_norm_.forward(h, ln, mean, rstd);
  Tensor fc1 = fc1_.forward(ln);
  const int64_t ffn = c.ffn_hidden_size / tp_.size();
  Tensor act = Tensor::empty({n, ffn});
  if (c.swiglu)
    kernels::swiglu_forward(fc1.f32(), act.f32(), n, ffn);
  else
    kernels::gelu_forward(fc1.f32(), act.f32(), act.numel());
  Tensor y = fc2_.forward(act);
  add_into(y, h);
  return y;
}

}  // namespace tessera::model
