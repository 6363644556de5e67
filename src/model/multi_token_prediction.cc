#include "model/multi_token_prediction.h"

#include "kernels/adamw.h"
#include "kernels/column_copy.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/precision.h"
#include "kernels/tensor_ops.h"
#include "model/sequence_roll.h"

namespace tessera::model {
namespace {

constexpr int kMtpEmbeddingDropoutSite = 0;  // the embedding's site, of "layer" num_layers + k

// The loss tokens of a 0/1 loss mask (Megatron's masks are 0/1; the sum of squares is the sum), of the whole
// sequence: under context parallelism summed over the ranks' chunks, so that every rank weighs its part of
// a module's loss by the micro-batch's ratio, as the single process does.
double mask_tokens(const Tensor& mask, const ForwardContext& ctx) {
  const double local = kernels::sum_of_squares(mask);
  if (ctx.context_parallel == nullptr || ctx.context_parallel->size() == 1) return local;
  Tensor sum = kernels::scalar_tensor(local);  // a count below 2^24: exact in fp32
  ctx.context_parallel->group->all_reduce(sum);
  return kernels::scalar_value(sum);
}

// What mask_tokens gives for the loss mask rolled left `depth` times, from the micro-batch's loss mask on the
// host (sample-major [batch, seq], the whole sequence): the rolled mask holds positions depth.. of each
// sequence (roll_left fills the end with 0; under context parallelism the chunks roll as the whole
// sequence), so it counts those, with no copy back from a device. The same count as mask_tokens' for
// Megatron's 0/1 masks (integers below 2^24: exact in any order and precision).
double host_mask_tokens(const Tensor& host_mask, int64_t depth) {
  TESSERA_CHECK(host_mask.ndim() == 2, "multi-token prediction: the host loss mask ", shape_str(host_mask.shape()),
                " is not [batch, seq]");
  TESSERA_CHECK(host_mask.device().type == DeviceType::CPU, "multi-token prediction: the host loss mask is on ",
                host_mask.device().str());
  const int64_t samples = host_mask.dim(0), seq = host_mask.dim(1);
  double sum = 0;
  for (int64_t s = 0; s < samples && depth < seq; ++s)  // the CPU's kernel on host memory: no device involved
    sum += kernels::sum_of_squares(host_mask.flat_range(s * seq + depth, seq - depth));
  return sum;
}

std::string module_prefix(int64_t index) { return str_cat("mtp.layers.", index, "."); }

}  // namespace

int64_t MtpRecord::bytes() const {
  int64_t total = 0;
  for (const MtpDepthRecord& d : depths) {
    total += d.layer.bytes() + d.head.head_bytes();
    for (const Tensor* t : {&d.tokens, &d.embedding_positions, &d.embedding, &d.e, &d.e_mean, &d.e_rstd, &d.h,
                            &d.h_mean, &d.h_rstd, &d.cat, &d.final_input, &d.final_mean, &d.final_rstd})
      if (t->defined()) total += static_cast<int64_t>(t->nbytes());
  }
  return total;
}

std::vector<std::string> mtp_loss_names(const ModelConfig& c) {
  std::vector<std::string> names;
  for (int64_t k = 1; k <= c.mtp_num_layers; ++k) names.push_back(str_cat("mtp_", k, " loss"));
  return names;
}

MultiTokenPrediction::MultiTokenPrediction(const ModelConfig& config, ParameterSet& params,
                                           const parallel::TensorParallelContext& tp,
                                           const TransformerLayerSpec& layer_spec, Parameter& words,
                                           Parameter* positions, const LMHead& head)
    : config_(config),
      tp_(tp),
      words_(words),
      positions_(positions),
      head_(head),
      vocab_begin_(tp.rank() * (config.padded_vocab_size / tp.size())),
      vocab_end_(vocab_begin_ + config.padded_vocab_size / tp.size()),
      begin_(params.numel()) {
  const ModelConfig& c = config_;
  const bool sp = tp.sequence_parallel;
  for (int64_t i = 0; i < c.mtp_num_layers; ++i) {
    const std::string prefix = module_prefix(i);
    Module m;
    // Declared in Megatron's order: enorm, hnorm, eh_proj, the layer, its final norm.
    m.enorm = std::make_unique<Norm>(params, prefix + "enorm", c, sp);
    m.hnorm = std::make_unique<Norm>(params, prefix + "hnorm", c, sp);
    m.eh_proj = std::make_unique<ColumnParallelLinear>(params, prefix + "eh_proj", 2 * c.hidden_size,
                                                       Shape{c.hidden_size}, 0, false, c.init_method_std, tp,
                                                       c.params_dtype);
    m.layer = std::make_unique<TransformerLayer>(c, c.num_layers + i + 1, prefix + "transformer_layer.", params, tp,
                                                 layer_spec);
    m.final_norm = std::make_unique<Norm>(params, prefix + "final_layernorm", c, sp);
    modules_.push_back(std::move(m));
  }
  end_ = params.numel();
}

Tensor MultiTokenPrediction::embed(const Tensor& tokens, const Tensor& positions, int64_t depth,
                                   const ForwardContext& ctx) const {
  const ModelConfig& c = config_;
  Tensor partial = Tensor::empty({tokens.numel(), c.hidden_size});
  // The replicated position table is added on tensor rank 0 only, before the group's sum (as the embedding).
  const Tensor wpe = positions_ && tp_.rank() == 0 ? positions_->value : Tensor();
  kernels::embedding_forward(tokens, positions, words_.value, wpe, partial, vocab_begin_, vocab_end_);
  Tensor x = parallel::reduce_to_input(partial, tp_);
  kernels::round_to(c.params_dtype, x, x);
  if (ctx.training && c.hidden_dropout > 0.0f)
    residual_dropout(x, c.hidden_dropout, ctx.seed,
                     dropout_stream(ctx.iteration, c.num_layers + depth, kMtpEmbeddingDropoutSite), ctx,
                     c.hidden_size, tp_, /*backward=*/false);
  return x;
}

void MultiTokenPrediction::embed_backward(const Tensor& dy, const Tensor& tokens, const Tensor& positions,
                                          int64_t depth, const ForwardContext& ctx) const {
  const ModelConfig& c = config_;
  if (ctx.training && c.hidden_dropout > 0.0f)
    residual_dropout(dy, c.hidden_dropout, ctx.seed,
                     dropout_stream(ctx.iteration, c.num_layers + depth, kMtpEmbeddingDropoutSite), ctx,
                     c.hidden_size, tp_, /*backward=*/true);
  Tensor dfull = parallel::gather_to_tensor_parallel(dy, tp_);
  kernels::embedding_backward(tokens, positions, dfull, words_.grad, positions_ ? positions_->grad : Tensor(),
                              vocab_begin_, vocab_end_);
}

void MultiTokenPrediction::forward(const Tensor& h0, const Tensor& tokens, const Tensor& labels,
                                   const Tensor& loss_mask, const Tensor& positions, const ForwardContext& ctx,
                                   MtpRecord& rec, LossSums& losses, const Tensor& host_loss_mask) const {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size, hl = h / tp_.size(), batch = ctx.batch;
  const DType rounding = kernels::gemm_rounding(c.params_dtype);
  const bool rounded = rounding != DType::F32;
  // Kept on the device: no count and no loss copied back (LossSums::keeps_on).
  const bool deferred = host_loss_mask.defined() && losses.keeps_on(h0.device());
  const double loss_tokens = deferred ? host_mask_tokens(host_loss_mask, 0) : mask_tokens(loss_mask, ctx);
  const std::vector<std::string> names = mtp_loss_names(c);
  rec.depths.clear();
  rec.depths.resize(modules_.size());
  Tensor prev = h0, ids = tokens, ids_positions = positions, depth_labels = labels, depth_mask = loss_mask;
  for (size_t i = 0; i < modules_.size(); ++i) {
    const Module& m = modules_[i];
    MtpDepthRecord& d = rec.depths[i];
    const int64_t depth = static_cast<int64_t>(i) + 1;
    ids = roll_left(ids, batch, ctx.context_parallel);
    ids_positions = roll_left(ids_positions, batch, ctx.context_parallel);
    d.tokens = ids;
    d.embedding_positions = ids_positions;
    d.embedding = embed(ids, positions_ ? ids_positions : Tensor(), depth, ctx);
    m.enorm->forward(d.embedding, d.e, d.e_mean, d.e_rstd, rounding);
    d.h_in = prev;
    m.hnorm->forward(prev, d.h, d.h_mean, d.h_rstd, rounding);
    const int64_t rows = d.e.dim(0);
    d.cat = Tensor::empty({rows, 2 * h});
    kernels::copy_columns(d.e, {0, 1}, d.cat, {0, 1}, h);
    kernels::copy_columns(d.h, {0, 1}, d.cat, {h, 1}, h);
    // eh_proj's output columns gathered over the tensor group (Megatron's gather_from_tensor_model_parallel_
    // region), then this rank's sequence shard under sequence parallelism (scatter_to_sequence_parallel_region).
    Tensor local = m.eh_proj->forward(d.cat, rounded);  // [T, h / tp]
    const int64_t tokens_all = local.dim(0);
    Tensor x = local;
    if (tp_.size() > 1) {
      Tensor stacked = parallel::gather_rows(local, *tp_.group);  // [tp * T, h / tp]
      Tensor full = Tensor::empty({tokens_all, h});
      for (int r = 0; r < tp_.size(); ++r)
        kernels::copy_columns(stacked.narrow(r * tokens_all, tokens_all), {0, 1}, full, {r * hl, 1}, hl);
      x = tp_.sequence_parallel ? full.narrow(tp_.rank() * rows, rows).clone() : full;
    }
    Tensor y = m.layer->forward(x, positions, ctx, d.layer);
    d.final_input = y;
    Tensor hk;
    m.final_norm->forward(y, hk, d.final_mean, d.final_rstd, rounding);
    depth_labels = roll_left(depth_labels, batch, ctx.context_parallel);
    depth_mask = roll_left(depth_mask, batch, ctx.context_parallel);
    d.head.labels = depth_labels;
    d.head.loss_mask = depth_mask;
    const double depth_tokens = deferred ? host_mask_tokens(host_loss_mask, depth) : mask_tokens(depth_mask, ctx);
    d.weight = depth_tokens > 0 ? loss_tokens / depth_tokens : 0.0;
    if (deferred) {  // settle() adds loss * weight, as below
      const Tensor slot = losses.auxiliary_slot(names[i], h0.device(), [w = d.weight](double loss) { return loss * w; });
      head_.output_loss(hk, rounded, d.head, &slot);
    } else {
      const double loss = head_.output_loss(hk, rounded, d.head);
      losses.add_auxiliary(names[i], loss * d.weight);
    }
    prev = hk;
  }
}

Tensor MultiTokenPrediction::backward(MtpRecord& rec, const Tensor& positions, const ForwardContext& ctx,
                                      float grad_scale) const {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size, hl = h / tp_.size();
  const bool rounded = kernels::gemm_rounding(c.params_dtype) != DType::F32;
  const float factor = c.mtp_loss_scaling_factor / static_cast<float>(c.mtp_num_layers);
  Tensor dnext;  // the gradient of the later depth's input h_k
  for (size_t i = modules_.size(); i-- > 0;) {
    const Module& m = modules_[i];
    MtpDepthRecord& d = rec.depths[i];
    const int64_t depth = static_cast<int64_t>(i) + 1;
    Tensor dh = head_.output_loss_backward(d.head, grad_scale * factor * static_cast<float>(d.weight));
    if (dnext.defined()) kernels::add_into(dh, dnext);
    Tensor dy = Tensor::zeros(d.final_input.shape());
    m.final_norm->backward(dh, d.final_input, d.final_mean, d.final_rstd, dy);
    dh = Tensor();
    Tensor dx = m.layer->backward(dy, positions, ctx, d.layer);
    dy = Tensor();
    // The conjugates of the column gather and the sequence scatter: all rows, this rank's columns.
    Tensor dlocal = dx;
    if (tp_.size() > 1) {
      Tensor dfull = parallel::gather_to_tensor_parallel(dx, tp_);  // [T, h]
      dlocal = Tensor::empty({dfull.dim(0), hl});
      kernels::copy_columns(dfull, {tp_.rank() * hl, 1}, dlocal, {0, 1}, hl);
    }
    Tensor dcat = m.eh_proj->backward(dlocal, d.cat, rounded);  // [T (/tp), 2h]
    const int64_t rows = dcat.dim(0);
    Tensor de = Tensor::empty({rows, h}), dhn = Tensor::empty({rows, h});
    kernels::copy_columns(dcat, {0, 1}, de, {0, 1}, h);
    kernels::copy_columns(dcat, {h, 1}, dhn, {0, 1}, h);
    Tensor demb = Tensor::zeros(d.embedding.shape());
    m.enorm->backward(de, d.embedding, d.e_mean, d.e_rstd, demb);
    embed_backward(demb, d.tokens, positions_ ? d.embedding_positions : Tensor(), depth, ctx);
    dnext = Tensor::zeros(d.h_in.shape());
    m.hnorm->backward(dhn, d.h_in, d.h_mean, d.h_rstd, dnext);
    d = MtpDepthRecord();  // free as we go
  }
  rec.depths.clear();
  return dnext;
}

}  // namespace tessera::model
