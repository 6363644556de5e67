#include "model/self_attention.h"

#include <cmath>

#include "kernels/attention.h"
#include "kernels/decode_attention.h"
#include "kernels/elementwise.h"
#include "kernels/precision.h"
#include "kernels/rotary.h"
#include "kernels/token_layout.h"
#include "model/ring_attention.h"
#include "model/token_slice_attention.h"

namespace tessera::model {
namespace {

constexpr int kAttentionProbsDropoutSite = 1;

struct AttentionRecord final : SavedTensors {
  Tensor q, k, v;  // after rotary embedding: [T, heads, d], [T, groups, d], [T, groups, d]
  Tensor attn, lse;
  // --qk-layernorm: the query and key before their norms, and the norms' statistics.
  Tensor q_in, k_in, q_mean, q_rstd, k_mean, k_rstd;
  void visit(const std::function<void(Tensor&, bool)>& f) override {
    for (Tensor* t : {&q, &k, &v, &attn, &q_in, &k_in}) f(*t, true);
    for (Tensor* t : {&lse, &q_mean, &q_rstd, &k_mean, &k_rstd}) f(*t, false);
  }
  // The output is read in backward by linear_proj's dW product as it is, and by the attention kernels
  // only after backward widens it (SelfAttention::backward): a GPU keeps it in 16 bits until then.
  void visit_gemm_inputs(const std::function<void(Tensor&)>& f) override { f(attn); }
};

// The model's RoPE scaling in the kernels' terms (the frequencies they form).
kernels::math::RopeScaling kernel_rope_scaling(const ModelConfig& c) {
  kernels::math::RopeScaling s;
  if (c.rope_scaling == RopeScaling::None) return s;
  s.type = c.rope_scaling == RopeScaling::Llama3 ? kernels::math::RopeScalingType::kLlama3
                                                 : kernels::math::RopeScalingType::kLinear;
  s.factor = c.rope_scaling_factor;
  s.low_freq_factor = c.rope_low_freq_factor;
  s.high_freq_factor = c.rope_high_freq_factor;
  s.original_max_position = static_cast<double>(c.rope_original_max_position);
  return s;
}

// --qk-layernorm's forward on x [T, heads, d] in place of x; x_in keeps the input for backward.
void qk_norm_forward(const Norm& norm, Tensor& x, Tensor& x_in, Tensor& mean, Tensor& rstd) {
  Tensor y;
  norm.forward(x, y, mean, rstd);
  x_in = x;
  x = y.view(x_in.shape());
}

// Its backward: dx (the gradient of the norm's output) becomes the gradient of its input.
void qk_norm_backward(const Norm& norm, Tensor& dx, const Tensor& x_in, const Tensor& mean, const Tensor& rstd) {
  Tensor d_in = Tensor::zeros(x_in.shape());  // Norm::backward adds into it
  norm.backward(dx, x_in, mean, rstd, d_in);
  dx = d_in;
}

// Under mixed precision attention multiplies 16-bit q, k, v and output gradients, as the GEMMs do.
void round_for_attention(DType t, const Tensor& x) {
  if (t != DType::F32) kernels::round_to(t, x, x);
}

kernels::AttentionShape attention_shape(const ForwardContext& ctx, int64_t heads, int64_t groups, int64_t d,
                                        bool causal) {
  kernels::AttentionShape s{ctx.seq, ctx.batch, heads, groups, d};  // the masks travel as tensors
  s.causal = causal;
  return s;
}

// Keyed by global head index, so a rank's heads draw the masks they would in a single process.
kernels::AttentionDropout attention_dropout(const ModelConfig& c, const ForwardContext& ctx, int64_t layer_number,
                                            int64_t head_offset) {
  kernels::AttentionDropout d;
  d.p = ctx.training ? c.attention_dropout : 0.0f;
  d.seed = ctx.seed;
  d.stream = dropout_stream(ctx.iteration, layer_number, kAttentionProbsDropoutSite);
  d.sample_offset = ctx.sample_offset;
  d.head_offset = head_offset;
  d.total_heads = c.num_attention_heads;
  return d;
}

}  // namespace

SelfAttention::SelfAttention(const ModelConfig& config, int64_t layer_number, const std::string& prefix,
                             ParameterSet& params, const parallel::TensorParallelContext& tp, bool causal)
    : config_(config),
      layer_number_(layer_number),
      tp_(tp),
      heads_(config.num_attention_heads / tp.size()),
      groups_(config.num_query_groups / tp.size()),
      causal_(causal),
      // Split by query groups: each rank holds whole groups (their query heads, key and value).
      qkv_(params, prefix + "linear_qkv", config.hidden_size,
           {config.num_query_groups, (config.query_heads_per_group() + 2) * config.kv_channels}, 0,
           config.add_bias_linear, config.init_method_std, tp, config.params_dtype),
      proj_(params, prefix + "linear_proj", config.num_attention_heads * config.kv_channels, config.hidden_size,
            config.add_bias_linear, output_init_std(config), tp, config.params_dtype),
      rope_scaling_(kernel_rope_scaling(config)) {
  if (config.qk_layernorm) {
    // Replicated across the tensor group, each rank normalising its own heads: the weights' gradients
    // are partial sums over the group, as sequence-parallel norms' are.
    const bool partial = tp.size() > 1;
    q_norm_ = std::make_unique<Norm>(params, prefix + "q_layernorm", config, partial, config.kv_channels);
    k_norm_ = std::make_unique<Norm>(params, prefix + "k_layernorm", config, partial, config.kv_channels);
  }
}

std::unique_ptr<SavedTensors> SelfAttention::make_record() const { return std::make_unique<AttentionRecord>(); }

Tensor SelfAttention::forward(const Tensor& x, bool x_rounded, const SublayerContext& sc, SavedTensors& record) const {
  const ModelConfig& c = config_;
  const ForwardContext& ctx = sc.ctx;
  auto& rec = static_cast<AttentionRecord&>(record);
  const int64_t rows = ctx.seq * ctx.batch, d = c.kv_channels;  // attention sees every token
  Tensor qkv = qkv_.forward(x, x_rounded);
  rec.q = Tensor::empty({rows, heads_, d});
  rec.k = Tensor::empty({rows, groups_, d});
  rec.v = Tensor::empty({rows, groups_, d});
  kernels::split_qkv(qkv, rec.q, rec.k, rec.v, c.query_heads_per_group());
  qkv = Tensor();
  if (q_norm_) {
    qk_norm_forward(*q_norm_, rec.q, rec.q_in, rec.q_mean, rec.q_rstd);
    qk_norm_forward(*k_norm_, rec.k, rec.k_in, rec.k_mean, rec.k_rstd);
  }
  if (c.position_embedding == PositionEmbedding::Rope) {
    kernels::rope_forward(rec.q, sc.positions, c.rotary_dim(), c.rotary_base, rope_scaling_);
    kernels::rope_forward(rec.k, sc.positions, c.rotary_dim(), c.rotary_base, rope_scaling_);
  }
  for (const Tensor* t : {&rec.q, &rec.k, &rec.v}) round_for_attention(c.params_dtype, *t);
  rec.attn = Tensor::empty({rows, heads_ * d});
  if (ctx.context_parallel) {  // per query chunk: [2, batch, heads, seq / 2]
    rec.lse = Tensor::empty({2, ctx.batch, heads_, ctx.seq / 2});
    ring_attention_forward(*ctx.context_parallel, rec.q, rec.k, rec.v, rec.attn, rec.lse, ring_shape(ctx),
                           1.0f / std::sqrt(static_cast<float>(d)),
                           attention_dropout(c, ctx, layer_number_, tp_.rank() * heads_), ctx.doc_start);
    return proj_.forward(rec.attn, make_gemm_input(c.params_dtype, rec.attn));
  }
  rec.lse = Tensor::empty({ctx.batch, heads_, ctx.seq});
  if (ctx.token_slice) {
    slice_forward(ctx, rec.q, rec.k, rec.v, rec.attn, rec.lse);
    rec.k = rec.v = Tensor();  // the layer's cache holds them
    return proj_.forward(rec.attn, make_gemm_input(c.params_dtype, rec.attn));
  }
  kernels::attention_forward(rec.q, rec.k, rec.v, rec.attn, rec.lse, causal_ ? ctx.doc_start : ctx.padding_mask,
                             attention_shape(ctx, heads_, groups_, d, causal_), 1.0f / std::sqrt(static_cast<float>(d)),
                             attention_dropout(c, ctx, layer_number_, tp_.rank() * heads_));
  return proj_.forward(rec.attn, make_gemm_input(c.params_dtype, rec.attn));
}

Tensor SelfAttention::backward(const Tensor& dy, const Tensor& x, bool x_rounded, const SublayerContext& sc,
                               SavedTensors& record, bool rec_rounded) const {
  const ModelConfig& c = config_;
  const ForwardContext& ctx = sc.ctx;
  auto& rec = static_cast<AttentionRecord&>(record);
  const int64_t rows = ctx.seq * ctx.batch, d = c.kv_channels;
  Tensor dattn = proj_.backward(dy, rec.attn, rec_rounded);
  // The attention kernels read the output in fp32 (D = rowsum(dO O)): a 16-bit one kept for the GEMM
  // above is widened here (exactly), for them alone.
  rec.attn = kernels::to_fp32(rec.attn);
  round_for_attention(c.params_dtype, dattn);
  Tensor dq = Tensor::empty(rec.q.shape()), dk, dv;
  if (ctx.token_slice) {
    slice_backward(ctx, rec.q, rec.attn, rec.lse, dattn, dq, dk, dv);
  } else if (ctx.context_parallel) {
    dk = Tensor::empty(rec.k.shape());
    dv = Tensor::empty(rec.v.shape());
    ring_attention_backward(*ctx.context_parallel, rec.q, rec.k, rec.v, rec.attn, rec.lse, dattn, dq, dk, dv,
                            ring_shape(ctx), 1.0f / std::sqrt(static_cast<float>(d)),
                            attention_dropout(c, ctx, layer_number_, tp_.rank() * heads_), ctx.doc_start);
  } else {
    dk = Tensor::empty(rec.k.shape());
    dv = Tensor::empty(rec.v.shape());
    kernels::attention_backward(rec.q, rec.k, rec.v, rec.attn, rec.lse, dattn, dq, dk, dv,
                                causal_ ? ctx.doc_start : ctx.padding_mask,
                                attention_shape(ctx, heads_, groups_, d, causal_), 1.0f / std::sqrt(static_cast<float>(d)),
                                attention_dropout(c, ctx, layer_number_, tp_.rank() * heads_));
  }
  dattn = Tensor();
  if (c.position_embedding == PositionEmbedding::Rope) {
    kernels::rope_backward(dq, sc.positions, c.rotary_dim(), c.rotary_base, rope_scaling_);
    kernels::rope_backward(dk, sc.positions, c.rotary_dim(), c.rotary_base, rope_scaling_);
  }
  if (q_norm_) {
    qk_norm_backward(*q_norm_, dq, rec.q_in, rec.q_mean, rec.q_rstd);
    qk_norm_backward(*k_norm_, dk, rec.k_in, rec.k_mean, rec.k_rstd);
  }
  Tensor dqkv = Tensor::empty({rows, c.qkv_size() / tp_.size()});
  kernels::merge_qkv(dq, dk, dv, dqkv, c.query_heads_per_group());
  dq = dk = dv = Tensor();
  return qkv_.backward(dqkv, x, x_rounded);
}

// Context parallelism: this rank's two chunks of the sequence against the ring's key/value blocks.
RingAttentionShape SelfAttention::ring_shape(const ForwardContext& ctx) const {
  TESSERA_CHECK(causal_ && ctx.token_slice == nullptr, "context parallelism needs causal attention (no padding "
                "mask) and no token slices");
  TESSERA_CHECK(ctx.seq % 2 == 0, "context parallelism: a rank's ", ctx.seq, " positions are not two equal chunks");
  return {ctx.seq / 2, ctx.batch, heads_, groups_, config_.kv_channels, ctx.context_parallel->size()};
}

// A token slice (model/token_sliced_chunk.h): its keys and values go into the layer's cache at its positions,
// and its queries attend to the cache up to its end (model/token_slice_attention.h).
void SelfAttention::slice_forward(const ForwardContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& attn, const Tensor& lse) const {
  const int64_t d = config_.kv_channels;
  token_slice_attention_forward(ctx, layer_number_, q, k, v, attn, lse,
                                attention_shape(ctx, heads_, groups_, d, causal_),
                                1.0f / std::sqrt(static_cast<float>(d)),
                                attention_dropout(config_, ctx, layer_number_, tp_.rank() * heads_));
}

void SelfAttention::slice_backward(const ForwardContext& ctx, const Tensor& q, const Tensor& attn, const Tensor& lse,
                                   const Tensor& dattn, const Tensor& dq, Tensor& dk, Tensor& dv) const {
  const int64_t d = config_.kv_channels;
  token_slice_attention_backward(ctx, layer_number_, q, attn, lse, dattn, dq, dk, dv,
                                 attention_shape(ctx, heads_, groups_, d, causal_),
                                 1.0f / std::sqrt(static_cast<float>(d)),
                                 attention_dropout(config_, ctx, layer_number_, tp_.rank() * heads_));
}

void SelfAttention::add_to_kv_cache(int64_t blocks, int64_t block_size, KvCache& cache) const {
  cache.k = Tensor::empty({blocks, block_size, groups_, config_.kv_channels});
  cache.v = Tensor::empty({blocks, block_size, groups_, config_.kv_channels});
}

Tensor SelfAttention::decode(const Tensor& x, const DecodeLayout& layout, KvCache& cache) const {
  const ModelConfig& c = config_;
  const int64_t n = x.dim(0), d = c.kv_channels;
  TESSERA_CHECK(causal_, "incremental decoding needs causal attention");
  Tensor qkv = qkv_.forward(x);
  Tensor q = Tensor::empty({n, heads_, d}), k = Tensor::empty({n, groups_, d}), v = Tensor::empty({n, groups_, d});
  kernels::split_qkv(qkv, q, k, v, c.query_heads_per_group());
  if (q_norm_) {
    Tensor in, mean, rstd;
    qk_norm_forward(*q_norm_, q, in, mean, rstd);
    qk_norm_forward(*k_norm_, k, in, mean, rstd);
  }
  if (c.position_embedding == PositionEmbedding::Rope) {
    kernels::rope_forward(q, layout.positions, c.rotary_dim(), c.rotary_base, rope_scaling_);
    kernels::rope_forward(k, layout.positions, c.rotary_dim(), c.rotary_base, rope_scaling_);
  }
  for (const Tensor* t : {&q, &k, &v}) round_for_attention(c.params_dtype, *t);
  kernels::write_kv_cache(k, v, cache.k, cache.v, layout.sequences);
  Tensor attn = Tensor::empty({n, heads_ * d});
  kernels::attention_decode(q, cache.k, cache.v, attn, layout.sequences, 1.0f / std::sqrt(static_cast<float>(d)));
  return proj_.forward(attn);
}

}  // namespace tessera::model
