#include "model/transformer_layer.h"

#include <cmath>

#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/precision.h"
#include "model/moe_layer.h"
#include "model/multi_latent_attention.h"
#include "model/self_attention.h"

namespace tessera::model {
namespace {

std::string layer_prefix(const TransformerLayerSpec& spec, int64_t layer_number) {
  return str_cat(spec.block, ".layers.", layer_number - 1, ".");
}

// The type a pre-LN norm whose output feeds `slot` writes it in: where the slot takes a 16-bit input and
// the GEMMs read 16-bit buffers on x's device (a GPU under --bf16/--fp16, kernels::gemm_buffer_type),
// the 16-bit type itself, so that no fp32 copy is made and the GEMMs read it with no encoding; else
// fp32 (the CPU: its values rounded to `rounding`, which the 16-bit tensor holds exactly).
DType norm_output_type(DType rounding, const Sublayer& slot, const Tensor& x) {
  if (rounding == DType::F32 || !slot.takes_16bit_input()) return DType::F32;
  return kernels::gemm_buffer_type(rounding, x.device());
}

}  // namespace

float output_init_std(const ModelConfig& c) {
  return c.init_method_std / std::sqrt(2.0f * static_cast<float>(c.num_layers));
}

TransformerLayerSpec gpt_layer_spec() {
  TransformerLayerSpec spec;
  spec.self_attention = [](const ModelConfig& c, int64_t layer, const std::string& prefix, ParameterSet& params,
                           const parallel::TensorParallelContext& tp) -> std::unique_ptr<Sublayer> {
    if (c.mla.enabled) return std::make_unique<MultiLatentAttention>(c, layer, prefix, params, tp);
    return std::make_unique<SelfAttention>(c, layer, prefix, params, tp, /*causal=*/true);
  };
  spec.mlp = make_feed_forward;
  return spec;
}

TransformerLayerSpec bert_layer_spec() {
  TransformerLayerSpec spec = gpt_layer_spec();
  spec.self_attention = [](const ModelConfig& c, int64_t layer, const std::string& prefix, ParameterSet& params,
                           const parallel::TensorParallelContext& tp) {
    return std::make_unique<SelfAttention>(c, layer, prefix, params, tp, /*causal=*/false);
  };
  spec.block = "encoder";
  return spec;
}

void LayerRecord::visit(const std::function<void(Tensor&, bool)>& f) {
  for (Tensor* t : {&input, &ln1, &residual, &ln2}) f(*t, true);
  for (Tensor* t : {&ln1_mean, &ln1_rstd, &ln2_mean, &ln2_rstd}) f(*t, false);
  if (attention) attention->visit(f);
  if (mlp) mlp->visit(f);
}

void LayerRecord::visit_gemm_inputs(const std::function<void(Tensor&)>& f) {
  if (ln1_gemm_input) f(ln1);
  if (ln2_gemm_input) f(ln2);
  if (attention) attention->visit_gemm_inputs(f);
  if (mlp) mlp->visit_gemm_inputs(f);
}

// The norms (and the slots' parameters after them) are declared in this order, which fixes the layer's
// flat parameter layout.
TransformerLayer::TransformerLayer(const ModelConfig& config, int64_t layer_number, ParameterSet& params,
                                   const parallel::TensorParallelContext& tp, const TransformerLayerSpec& spec)
    : TransformerLayer(config, layer_number, layer_prefix(spec, layer_number), params, tp, spec) {}

TransformerLayer::TransformerLayer(const ModelConfig& config, int64_t layer_number, const std::string& prefix,
                                   ParameterSet& params, const parallel::TensorParallelContext& tp,
                                   const TransformerLayerSpec& spec)
    : config_(config),
      layer_number_(layer_number),
      tp_(tp),
      input_norm_(params, prefix + "input_layernorm", config, tp.sequence_parallel),
      pre_mlp_norm_(params, prefix + "pre_mlp_layernorm", config, tp.sequence_parallel),
      self_attention_(spec.self_attention(config, layer_number, prefix + "self_attention.", params, tp)),
      mlp_(spec.mlp(config, layer_number, prefix + "mlp.", params, tp)) {}

void TransformerLayer::hidden_dropout(const Tensor& x, const ForwardContext& ctx, int site, bool backward) const {
  if (!ctx.training || config_.hidden_dropout == 0.0f) return;
  residual_dropout(x, config_.hidden_dropout, ctx.seed, dropout_stream(ctx.iteration, layer_number_, site), ctx,
                   config_.hidden_size, tp_, backward);
}

Tensor TransformerLayer::forward(const Tensor& x, const Tensor& positions, const ForwardContext& ctx,
                                 LayerRecord& rec) const {
  const SublayerContext sc{ctx, positions};
  if (!rec.attention) rec.attention = self_attention_->make_record();
  if (!rec.mlp) rec.mlp = mlp_->make_record();
  rec.input = x;
  const bool post_ln = config_.apply_residual_connection_post_layernorm;
  // Pre-LN, the norms' outputs feed only GEMMs (and are kept in 16 bits for backward), so they are
  // rounded where they are made instead of in the GEMM. Post-LN they are residuals too: kept in fp32.
  const DType rounding = post_ln ? DType::F32 : kernels::gemm_rounding(config_.params_dtype);
  const bool rounded = rounding != DType::F32;
  // Post-LN, rounding is F32, and so are the outputs.
  rec.ln1_gemm_input = rounded && self_attention_->takes_16bit_input();
  rec.ln2_gemm_input = rounded && mlp_->takes_16bit_input();
  input_norm_.forward(x, rec.ln1, rec.ln1_mean, rec.ln1_rstd, rounding,
                      norm_output_type(rounding, *self_attention_, x));
  Tensor h = self_attention_->forward(rec.ln1, rounded, sc, *rec.attention);
  hidden_dropout(h, ctx, kAttentionOutput, false);
  // The residual add and the norm after it in one pass over h (h += the residual, then ln2 = norm(h)).
  pre_mlp_norm_.forward_after_residual(h, post_ln ? rec.ln1 : x, rec.ln2, rec.ln2_mean, rec.ln2_rstd, rounding,
                                       norm_output_type(rounding, *mlp_, x));
  rec.residual = h;

  Tensor y = mlp_->forward(rec.ln2, rounded, sc, *rec.mlp);
  hidden_dropout(y, ctx, kMlpOutput, false);
  kernels::add_into(y, post_ln ? rec.ln2 : h);
  rec.store_activations_as(config_.params_dtype);
  return y;
}

Tensor TransformerLayer::backward(const Tensor& dy, const Tensor& positions, const ForwardContext& ctx,
                                  LayerRecord& rec) const {
  const SublayerContext sc{ctx, positions};
  // Activations widened from 16-bit storage hold 16-bit values already: their GEMMs need not round them.
  const DType kept = rec.widen_activations();
  const bool widened = kept != DType::F32 && kept == config_.params_dtype;

  // Pre-LN: the residual path passes dy to dh and dh to dx, beside the norms. Post-LN it passes dy to the
  // norm's output u (and dh to z), so the norm's backward takes the sum.
  const bool post_ln = config_.apply_residual_connection_post_layernorm;
  // MLP block.
  Tensor dmlp = dy.clone();
  hidden_dropout(dmlp, ctx, kMlpOutput, true);
  Tensor dln2 = mlp_->backward(dmlp, rec.ln2, widened, sc, *rec.mlp, widened);
  dmlp = Tensor();
  Tensor dh = post_ln ? Tensor::zeros(dy.shape()) : dy.clone();
  if (post_ln) kernels::add_into(dln2, dy);
  pre_mlp_norm_.backward(dln2, rec.residual, rec.ln2_mean, rec.ln2_rstd, dh);
  dln2 = Tensor();

  // Attention block.
  Tensor dattention = dh.clone();
  hidden_dropout(dattention, ctx, kAttentionOutput, true);
  Tensor dln1 = self_attention_->backward(dattention, rec.ln1, widened, sc, *rec.attention, widened);
  dattention = Tensor();
  Tensor dx = post_ln ? Tensor::zeros(dh.shape()) : dh;
  if (post_ln) kernels::add_into(dln1, dh);
  input_norm_.backward(dln1, rec.input, rec.ln1_mean, rec.ln1_rstd, dx);
  return dx;
}

KvCache TransformerLayer::make_kv_cache(int64_t blocks, int64_t block_size) const {
  KvCache cache;
  self_attention_->add_to_kv_cache(blocks, block_size, cache);
  mlp_->add_to_kv_cache(blocks, block_size, cache);
  return cache;
}

Tensor TransformerLayer::decode(const Tensor& x, const DecodeLayout& layout, KvCache& cache) const {
  TESSERA_CHECK(!tp_.sequence_parallel, "incremental decoding needs a model built without sequence parallelism");
  Tensor ln, mean, rstd;
  input_norm_.forward(x, ln, mean, rstd);
  const bool post_ln = config_.apply_residual_connection_post_layernorm;
  Tensor h = self_attention_->decode(ln, layout, cache);
  pre_mlp_norm_.forward_after_residual(h, post_ln ? ln : x, ln, mean, rstd);
  Tensor y = mlp_->decode(ln, layout, cache);
  kernels::add_into(y, post_ln ? ln : h);
  return y;
}

}  // namespace tessera::model
