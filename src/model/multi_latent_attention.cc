#include "model/multi_latent_attention.h"

#include <algorithm>
#include <cmath>

#include "kernels/attention.h"
#include "kernels/column_copy.h"
#include "kernels/decode_attention.h"
#include "kernels/elementwise.h"
#include "kernels/linear.h"
#include "kernels/precision.h"
#include "kernels/rotary.h"
#include "model/ring_attention.h"
#include "model/token_slice_attention.h"
#include "parallel/tensor_parallel.h"

namespace tessera::model {
namespace {

constexpr int kMlaAttentionProbsDropoutSite = 1;  // SelfAttention's site: a layer has one attention

struct MlaRecord final : SavedTensors {
  Tensor q_lat, q_lat_n, kv_lat, kv_lat_n;  // the latents before and after their norms (none without)
  Tensor q, k, v;                           // the attention's [T, heads, head_dim], after RoPE
  // Its output, and linear_proj's input: the values' columns of it (undefined when the heads are as wide).
  Tensor attn, attn_v;
  Tensor lse, q_mean, q_rstd, kv_mean, kv_rstd;
  void visit(const std::function<void(Tensor&, bool)>& f) override {
    for (Tensor* t : {&q_lat, &q_lat_n, &kv_lat, &kv_lat_n, &q, &k, &v, &attn, &attn_v}) f(*t, true);
    for (Tensor* t : {&lse, &q_mean, &q_rstd, &kv_mean, &kv_rstd}) f(*t, false);
  }
  // linear_proj's input (attn_v, or attn itself) is read in backward by its dW product as it is; attn
  // by the attention kernels only after backward widens it: a GPU keeps both in 16 bits until then.
  void visit_gemm_inputs(const std::function<void(Tensor&)>& f) override {
    f(attn);
    f(attn_v);
  }
};

// A projection replicated over the tensor group: no split, no communication. Under sequence parallelism
// each rank sees its own rows, so its weight gradient is a partial sum over the group.
std::unique_ptr<ColumnParallelLinear> mla_replicated_linear(ParameterSet& params, const std::string& name, int64_t in,
                                                            int64_t out, const ModelConfig& c,
                                                            const parallel::TensorParallelContext& tp) {
  auto linear = std::make_unique<ColumnParallelLinear>(params, name, in, Shape{out}, 0, false, c.init_method_std,
                                                       parallel::TensorParallelContext::single_process(),
                                                       c.params_dtype, /*reduce=*/false);
  linear->weight()->spec.sequence_parallel_grad = tp.sequence_parallel;
  return linear;
}

// A latent's norm (--qk-layernorm); without one y stays undefined (mla_normed: the latent itself).
void mla_norm_forward(const Norm* norm, const Tensor& x, Tensor& y, Tensor& mean, Tensor& rstd) {
  if (norm != nullptr) norm->forward(x, y, mean, rstd);
}
const Tensor& mla_normed(const Tensor& latent, const Tensor& normed) { return normed.defined() ? normed : latent; }

Tensor mla_norm_backward(const Norm* norm, const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd) {
  if (norm == nullptr) return dy;
  Tensor dx = Tensor::zeros(x.shape());  // Norm::backward adds into it
  norm->backward(dy, x, mean, rstd, dx);
  return dx;
}

// DeepSeek's interleaved RoPE dimensions (x0, x1, x2, x3, ...) of `count` columns from src's column `first`
// into Megatron's halves (x0, x2, ... | x1, x3, ...) at dst's column `to` (and back).
void mla_deinterleave(const Tensor& src, int64_t first, const Tensor& dst, int64_t to, int64_t count) {
  const int64_t half = count / 2;
  kernels::copy_columns(src, {first, 2}, dst, {to, 1}, half);
  kernels::copy_columns(src, {first + 1, 2}, dst, {to + half, 1}, half);
}
void mla_interleave(const Tensor& src, int64_t first, const Tensor& dst, int64_t to, int64_t count) {
  const int64_t half = count / 2;
  kernels::copy_columns(src, {first, 1}, dst, {to, 2}, half);
  kernels::copy_columns(src, {first + half, 1}, dst, {to + 1, 2}, half);
}

void mla_round_for_attention(DType t, const Tensor& x) {
  if (t != DType::F32) kernels::round_to(t, x, x);
}

kernels::AttentionDropout mla_attention_dropout(const ModelConfig& c, const ForwardContext& ctx, int64_t layer_number,
                                                int64_t head_offset) {
  kernels::AttentionDropout d;
  d.p = ctx.training ? c.attention_dropout : 0.0f;
  d.seed = ctx.seed;
  d.stream = dropout_stream(ctx.iteration, layer_number, kMlaAttentionProbsDropoutSite);
  d.sample_offset = ctx.sample_offset;
  d.head_offset = head_offset;
  d.total_heads = c.num_attention_heads;
  return d;
}

void mla_check_context(const ForwardContext& ctx) {
  TESSERA_CHECK(ctx.token_slice == nullptr || ctx.context_parallel == nullptr,
                "multi-latent attention: token slices under context parallelism");
  TESSERA_CHECK(ctx.context_parallel == nullptr || ctx.seq % 2 == 0, "context parallelism: a rank's ", ctx.seq,
                " positions are not two equal chunks");
}

// Context parallelism: after the up projections MLA's attention is ordinary attention over heads of
// width d (queries and keys [no-RoPE | RoPE], values zero-padded alike), one key/value head per query
// head, so the ring runs it as it runs SelfAttention's. The RoPE parts were rotated at the rank's
// positions (sc.positions: its two chunks' global positions, which YaRN's frequencies read too).
RingAttentionShape mla_ring_shape(const ForwardContext& ctx, int64_t heads, int64_t d) {
  return {ctx.seq / 2, ctx.batch, heads, heads, d, ctx.context_parallel->size()};
}

}  // namespace

MultiLatentAttention::MultiLatentAttention(const ModelConfig& config, int64_t layer_number, const std::string& prefix,
                                           ParameterSet& params, const parallel::TensorParallelContext& tp)
    : config_(config),
      layer_number_(layer_number),
      tp_(tp),
      heads_(config.num_attention_heads / tp.size()),
      head_dim_(std::max(config.mla.q_head_dim(), config.mla.v_head_dim)),
      proj_(params, prefix + "linear_proj", config.num_attention_heads * config.mla.v_head_dim, config.hidden_size,
            config.add_bias_linear, output_init_std(config), tp, config.params_dtype),
      rope_scaling_(config.mla.rope_scaling()),
      rope_mscale_(static_cast<float>(config.mla.rope_mscale())),
      softmax_scale_(static_cast<float>(config.mla.softmax_scale())) {
  const MlaConfig& m = config.mla;
  TESSERA_CHECK(m.enabled, "MultiLatentAttention without --multi-latent-attention");
  TESSERA_CHECK(config.num_attention_heads % tp.size() == 0, "multi-latent attention: ", config.num_attention_heads,
                " heads do not split over ", tp.size(), " tensor-parallel ranks");
  kv_down_ = mla_replicated_linear(params, prefix + "linear_kv_down_proj", config.hidden_size,
                                   m.kv_lora_rank + m.qk_pos_emb_head_dim, config, tp);
  kv_up_ = std::make_unique<ColumnParallelLinear>(params, prefix + "linear_kv_up_proj", m.kv_lora_rank,
                                                  Shape{config.num_attention_heads, m.qk_head_dim + m.v_head_dim}, 0,
                                                  false, config.init_method_std, tp, config.params_dtype);
  if (m.q_lora_rank > 0) {
    q_down_ = mla_replicated_linear(params, prefix + "linear_q_down_proj", config.hidden_size, m.q_lora_rank, config, tp);
    q_up_ = std::make_unique<ColumnParallelLinear>(params, prefix + "linear_q_up_proj", m.q_lora_rank,
                                                   Shape{config.num_attention_heads, m.q_head_dim()}, 0, false,
                                                   config.init_method_std, tp, config.params_dtype);
  } else {
    q_proj_ = std::make_unique<ColumnParallelLinear>(params, prefix + "linear_q_proj", config.hidden_size,
                                                     Shape{config.num_attention_heads, m.q_head_dim()}, 0, false,
                                                     config.init_method_std, tp, config.params_dtype);
  }
  if (config.qk_layernorm) {
    if (m.q_lora_rank > 0)
      q_norm_ = std::make_unique<Norm>(params, prefix + "q_layernorm", config, tp.sequence_parallel, m.q_lora_rank);
    kv_norm_ = std::make_unique<Norm>(params, prefix + "kv_layernorm", config, tp.sequence_parallel, m.kv_lora_rank);
  }
}

std::unique_ptr<SavedTensors> MultiLatentAttention::make_record() const { return std::make_unique<MlaRecord>(); }

void MultiLatentAttention::rotate(const Tensor& x, const Tensor& positions, bool backward) const {
  const int64_t pos = config_.mla.qk_pos_emb_head_dim;
  if (backward) kernels::rope_backward(x, positions, pos, config_.rotary_base, rope_scaling_);
  else kernels::rope_forward(x, positions, pos, config_.rotary_base, rope_scaling_);
  if (rope_mscale_ != 1.0f) kernels::scale(x, rope_mscale_, x);  // YaRN's factor on cos and sin
}

Tensor MultiLatentAttention::forward(const Tensor& x, bool x_rounded, const SublayerContext& sc,
                                     SavedTensors& record) const {
  const ModelConfig& c = config_;
  const MlaConfig& m = c.mla;
  const ForwardContext& ctx = sc.ctx;
  mla_check_context(ctx);
  auto& rec = static_cast<MlaRecord&>(record);
  const int64_t rows = ctx.seq * ctx.batch, local_rows = x.numel() / c.hidden_size, d = head_dim_;
  const int64_t nope = m.qk_head_dim, pos = m.qk_pos_emb_head_dim, dv = m.v_head_dim;
  // Queries [T, heads, q_head_dim].
  Tensor q;
  if (q_down_) {
    rec.q_lat = q_down_->forward(x, x_rounded);
    mla_norm_forward(q_norm_.get(), rec.q_lat, rec.q_lat_n, rec.q_mean, rec.q_rstd);
    q = q_up_->forward(mla_normed(rec.q_lat, rec.q_lat_n));
  } else {
    q = q_proj_->forward(x, x_rounded);
  }
  q = q.view({rows, heads_, m.q_head_dim()});
  // The key/value latent and the shared RoPE key of this rank's rows.
  const Tensor kv_combined = kv_down_->forward(x, x_rounded);  // [local rows, kv_lora_rank + pos]
  rec.kv_lat = Tensor::empty({local_rows, m.kv_lora_rank});
  kernels::copy_columns(kv_combined, {0, 1}, rec.kv_lat, {0, 1}, m.kv_lora_rank);
  Tensor k_pe = Tensor::empty({local_rows, pos});
  mla_deinterleave(kv_combined, m.kv_lora_rank, k_pe, 0, pos);
  mla_norm_forward(kv_norm_.get(), rec.kv_lat, rec.kv_lat_n, rec.kv_mean, rec.kv_rstd);
  const Tensor kv = kv_up_->forward(mla_normed(rec.kv_lat, rec.kv_lat_n)).view({rows, heads_, nope + dv});
  k_pe = parallel::gather_to_tensor_parallel(k_pe, tp_).view({rows, 1, pos});
  rotate(k_pe, sc.positions, false);
  Tensor q_pe = Tensor::empty({rows, heads_, pos});
  mla_deinterleave(q, nope, q_pe, 0, pos);
  rotate(q_pe, sc.positions, false);
  // The attention's heads: [no-RoPE | RoPE] queries and keys, values, zero-padded to d.
  rec.q = d > m.q_head_dim() ? Tensor::zeros({rows, heads_, d}) : Tensor::empty({rows, heads_, d});
  rec.k = d > m.q_head_dim() ? Tensor::zeros({rows, heads_, d}) : Tensor::empty({rows, heads_, d});
  rec.v = d > dv ? Tensor::zeros({rows, heads_, d}) : Tensor::empty({rows, heads_, d});
  kernels::copy_columns(q, {0, 1}, rec.q, {0, 1}, nope);
  kernels::copy_columns(q_pe, {0, 1}, rec.q, {nope, 1}, pos);
  kernels::copy_columns(kv, {0, 1}, rec.k, {0, 1}, nope);
  kernels::copy_columns(k_pe, {0, 1}, rec.k, {nope, 1}, pos, heads_);
  kernels::copy_columns(kv, {nope, 1}, rec.v, {0, 1}, dv);
  for (const Tensor* t : {&rec.q, &rec.k, &rec.v}) mla_round_for_attention(c.params_dtype, *t);
  rec.attn = Tensor::empty({rows, heads_ * d});
  const kernels::AttentionDropout dropout = mla_attention_dropout(c, ctx, layer_number_, tp_.rank() * heads_);
  if (ctx.context_parallel) {  // per query chunk: [2, batch, heads, seq / 2]
    rec.lse = Tensor::empty({2, ctx.batch, heads_, ctx.seq / 2});
    ring_attention_forward(*ctx.context_parallel, rec.q, rec.k, rec.v, rec.attn, rec.lse,
                           mla_ring_shape(ctx, heads_, d), softmax_scale_, dropout, ctx.doc_start);
  } else if (ctx.token_slice) {
    // Token slices: the heads' keys and values (after the up projections and RoPE at the slice's global
    // positions) go into the layer's cache, which the later slices' queries attend to.
    rec.lse = Tensor::empty({ctx.batch, heads_, ctx.seq});
    token_slice_attention_forward(ctx, layer_number_, rec.q, rec.k, rec.v, rec.attn, rec.lse,
                                  {ctx.seq, ctx.batch, heads_, heads_, d}, softmax_scale_, dropout);
    rec.k = rec.v = Tensor();  // the layer's cache holds them
  } else {
    rec.lse = Tensor::empty({ctx.batch, heads_, ctx.seq});
    kernels::AttentionShape shape{ctx.seq, ctx.batch, heads_, heads_, d};
    kernels::attention_forward(rec.q, rec.k, rec.v, rec.attn, rec.lse, ctx.doc_start, shape, softmax_scale_, dropout);
  }
  if (d != dv) {
    rec.attn_v = Tensor::empty({rows, heads_ * dv});
    kernels::copy_columns(rec.attn.view({rows, heads_, d}), {0, 1}, rec.attn_v.view({rows, heads_, dv}), {0, 1}, dv);
  }
  Tensor& values = rec.attn_v.defined() ? rec.attn_v : rec.attn;
  return proj_.forward(values, make_gemm_input(c.params_dtype, values));
}

Tensor MultiLatentAttention::backward(const Tensor& dy, const Tensor& x, bool x_rounded, const SublayerContext& sc,
                                      SavedTensors& record, bool rec_rounded) const {
  const ModelConfig& c = config_;
  const MlaConfig& m = c.mla;
  const ForwardContext& ctx = sc.ctx;
  mla_check_context(ctx);
  auto& rec = static_cast<MlaRecord&>(record);
  const int64_t rows = ctx.seq * ctx.batch, local_rows = x.numel() / c.hidden_size, d = head_dim_;
  const int64_t nope = m.qk_head_dim, pos = m.qk_pos_emb_head_dim, dv = m.v_head_dim;
  Tensor dattn_v = proj_.backward(dy, rec.attn_v.defined() ? rec.attn_v : rec.attn, rec_rounded);
  // The attention kernels read the output in fp32: a 16-bit one kept for the GEMM is widened for them.
  rec.attn = kernels::to_fp32(rec.attn);
  mla_round_for_attention(c.params_dtype, dattn_v);
  Tensor dattn = dattn_v;
  if (d != dv) {
    dattn = Tensor::zeros({rows, heads_, d});
    kernels::copy_columns(dattn_v.view({rows, heads_, dv}), {0, 1}, dattn, {0, 1}, dv);
  }
  dattn_v = Tensor();
  Tensor dq = Tensor::empty(rec.q.shape()), dk, dv_all;
  const kernels::AttentionDropout dropout = mla_attention_dropout(c, ctx, layer_number_, tp_.rank() * heads_);
  if (ctx.token_slice) {  // dk, dv_all: views of the cache's gradients at the slice's positions
    token_slice_attention_backward(ctx, layer_number_, rec.q, rec.attn, rec.lse, dattn.view({rows, heads_ * d}), dq,
                                   dk, dv_all, {ctx.seq, ctx.batch, heads_, heads_, d}, softmax_scale_, dropout);
  } else if (ctx.context_parallel) {
    dk = Tensor::empty(rec.k.shape());
    dv_all = Tensor::empty(rec.v.shape());
    ring_attention_backward(*ctx.context_parallel, rec.q, rec.k, rec.v, rec.attn, rec.lse,
                            dattn.view({rows, heads_ * d}), dq, dk, dv_all, mla_ring_shape(ctx, heads_, d),
                            softmax_scale_, dropout, ctx.doc_start);
  } else {
    dk = Tensor::empty(rec.k.shape());
    dv_all = Tensor::empty(rec.v.shape());
    kernels::AttentionShape shape{ctx.seq, ctx.batch, heads_, heads_, d};
    kernels::attention_backward(rec.q, rec.k, rec.v, rec.attn, rec.lse, dattn.view({rows, heads_ * d}), dq, dk,
                                dv_all, ctx.doc_start, shape, softmax_scale_, dropout);
  }
  dattn = Tensor();
  // Keys and values: each head's no-RoPE key and value, and the shared RoPE key summed over the heads.
  Tensor dkv = Tensor::empty({rows, heads_, nope + dv});
  kernels::copy_columns(dk, {0, 1}, dkv, {0, 1}, nope);
  kernels::copy_columns(dv_all, {0, 1}, dkv, {nope, 1}, dv);
  Tensor dk_pe = Tensor::empty({rows, 1, pos});
  kernels::sum_columns(dk, {nope, 1}, dk_pe, {0, 1}, pos, heads_);
  dk = dv_all = Tensor();
  rotate(dk_pe, sc.positions, true);
  dk_pe = parallel::reduce_to_input(dk_pe.view({rows, pos}), tp_);  // [local rows, pos], summed over the heads
  const Tensor dkv_lat_n = kv_up_->backward(dkv.view({rows, heads_ * (nope + dv)}), mla_normed(rec.kv_lat, rec.kv_lat_n));
  dkv = Tensor();
  const Tensor dkv_lat = mla_norm_backward(kv_norm_.get(), dkv_lat_n, rec.kv_lat, rec.kv_mean, rec.kv_rstd);
  Tensor dkv_combined = Tensor::empty({local_rows, m.kv_lora_rank + pos});
  kernels::copy_columns(dkv_lat, {0, 1}, dkv_combined, {0, 1}, m.kv_lora_rank);
  mla_interleave(dk_pe, 0, dkv_combined, m.kv_lora_rank, pos);
  Tensor dx = kv_down_->backward(dkv_combined, x, x_rounded);
  dkv_combined = Tensor();
  // Queries.
  Tensor dq_proj = Tensor::empty({rows, heads_, m.q_head_dim()});
  kernels::copy_columns(dq, {0, 1}, dq_proj, {0, 1}, nope);
  Tensor dq_pe = Tensor::empty({rows, heads_, pos});
  kernels::copy_columns(dq, {nope, 1}, dq_pe, {0, 1}, pos);
  dq = Tensor();
  rotate(dq_pe, sc.positions, true);
  mla_interleave(dq_pe, 0, dq_proj, nope, pos);
  const Tensor dq_flat = dq_proj.view({rows, heads_ * m.q_head_dim()});
  if (q_down_) {
    const Tensor dq_lat_n = q_up_->backward(dq_flat, mla_normed(rec.q_lat, rec.q_lat_n));
    const Tensor dq_lat = mla_norm_backward(q_norm_.get(), dq_lat_n, rec.q_lat, rec.q_mean, rec.q_rstd);
    kernels::add_into(dx, q_down_->backward(dq_lat, x, x_rounded));
  } else {
    kernels::add_into(dx, q_proj_->backward(dq_flat, x, x_rounded));
  }
  return dx;
}

// The cache: [blocks, block_size, 1, kv_lora_rank + qk_pos_emb_head_dim] in k, serving as keys and values
// both (v stays undefined).
void MultiLatentAttention::add_to_kv_cache(int64_t blocks, int64_t block_size, KvCache& cache) const {
  cache.k = Tensor::empty({blocks, block_size, 1, config_.mla.kv_lora_rank + config_.mla.qk_pos_emb_head_dim});
}

// score_h(t, s) = q_nope_h(t) . (W_uk_h c(s)) + q_pe_h(t) . k_pe(s) = [q_nope_h W_uk_h | q_pe_h] . [c(s) | k_pe(s)],
// and head h's output W_uv_h (sum_s p(s) c(s)): attention of the absorbed queries over the cached rows.
Tensor MultiLatentAttention::decode(const Tensor& x, const DecodeLayout& layout, KvCache& cache) const {
  const ModelConfig& c = config_;
  const MlaConfig& m = c.mla;
  const int64_t n = x.numel() / c.hidden_size, nope = m.qk_head_dim, pos = m.qk_pos_emb_head_dim, dv = m.v_head_dim;
  const int64_t kr = m.kv_lora_rank, width = kr + pos, qd = m.q_head_dim();
  TESSERA_CHECK(cache.k.defined() && cache.k.dim(3) == width, "multi-latent attention: decoding without its cache");
  Tensor mean, rstd;
  Tensor q;
  if (q_down_) {
    const Tensor q_lat = q_down_->forward(x);
    Tensor q_lat_n;
    mla_norm_forward(q_norm_.get(), q_lat, q_lat_n, mean, rstd);
    q = q_up_->forward(mla_normed(q_lat, q_lat_n));
  } else {
    q = q_proj_->forward(x);
  }
  q = q.view({n, heads_ * qd});
  // The new positions' rows: [normed latent | rotated RoPE key].
  const Tensor kv_combined = kv_down_->forward(x);
  Tensor kv_lat = Tensor::empty({n, kr}), kv_lat_n;
  kernels::copy_columns(kv_combined, {0, 1}, kv_lat, {0, 1}, kr);
  mla_norm_forward(kv_norm_.get(), kv_lat, kv_lat_n, mean, rstd);
  Tensor k_pe = Tensor::empty({n, 1, pos});
  mla_deinterleave(kv_combined, kr, k_pe, 0, pos);
  rotate(k_pe, layout.positions, false);
  const Tensor rows = Tensor::empty({n, 1, width});
  kernels::copy_columns(mla_normed(kv_lat, kv_lat_n), {0, 1}, rows, {0, 1}, kr);
  kernels::copy_columns(k_pe, {0, 1}, rows, {kr, 1}, pos);
  mla_round_for_attention(c.params_dtype, rows);
  kernels::write_kv_cache(rows, rows, cache.k, cache.k, layout.sequences);
  // The absorbed queries [n, heads, width]: q_nope_h W_uk_h, then the rotated RoPE part.
  Tensor q_pe = Tensor::empty({n, heads_, pos});
  mla_deinterleave(q.view({n, heads_, qd}), nope, q_pe, 0, pos);
  rotate(q_pe, layout.positions, false);
  const Tensor q_abs = Tensor::empty({n, heads_ * width});
  kernels::copy_columns(q_pe, {0, 1}, q_abs.view({n, heads_, width}), {kr, 1}, pos);
  const Tensor w_up = kv_up_->weight()->value.view({heads_ * (nope + dv), kr});  // per head: W_uk_h, then W_uv_h
  Tensor q_nope_h = Tensor::empty({n, nope}), q_abs_h = Tensor::empty({n, kr});
  for (int64_t h = 0; h < heads_; ++h) {
    kernels::copy_columns(q, {h * qd, 1}, q_nope_h, {0, 1}, nope);
    // q_nope_h W_uk_h is a linear layer's dx (dy W); its x argument only gives the row count (no dw).
    kernels::linear_backward(q_nope_h, q_abs_h, w_up.narrow(h * (nope + dv), nope), q_abs_h, Tensor(), Tensor(),
                             c.params_dtype);
    kernels::copy_columns(q_abs_h, {0, 1}, q_abs, {h * width, 1}, kr);
  }
  mla_round_for_attention(c.params_dtype, q_abs);
  const Tensor out = Tensor::empty({n, heads_ * width});
  kernels::attention_decode(q_abs.view({n, heads_, width}), cache.k, cache.k, out, layout.sequences, softmax_scale_);
  // Each head's value: W_uv_h applied to its weighted sum of latents (the first kr columns of its output).
  const Tensor attn = Tensor::empty({n, heads_ * dv});
  Tensor o_h = Tensor::empty({n, kr}), v_h = Tensor::empty({n, dv});
  for (int64_t h = 0; h < heads_; ++h) {
    kernels::copy_columns(out, {h * width, 1}, o_h, {0, 1}, kr);
    kernels::linear_forward(o_h, w_up.narrow(h * (nope + dv) + nope, dv), Tensor(), v_h, c.params_dtype);
    kernels::copy_columns(v_h, {0, 1}, attn, {h * dv, 1}, dv);
  }
  return proj_.forward(attn);
}

}  // namespace tessera::model
