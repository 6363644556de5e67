#include "model/lm_head.h"

#include "model/weight_gradient_store.h"

#include "kernels/cross_entropy.h"
#include "kernels/elementwise.h"
#include "kernels/linear.h"
#include "kernels/precision.h"
#include "kernels/shard_layout.h"
#include "kernels/tensor_ops.h"
#include "kernels/vocab_parallel_loss.h"
#include "model/vocab_parallel_embedding.h"

namespace tessera::model {

int64_t LMHeadRecord::head_bytes() const {
  int64_t total = 0;
  for (const Tensor* t : {&labels, &loss_mask, &final_input, &final_ln, &final_mean, &final_rstd, &logits, &lse,
                          &teacher_logits, &kd_lse})
    if (t->defined()) total += static_cast<int64_t>(t->nbytes());
  return total;
}

namespace {
// The masked loss sum returned, or added to `total` on the device (then 0 is returned).
double loss_sum(const Tensor& max, const Tensor& sumexp, const Tensor& target, const Tensor& loss_mask,
                const Tensor& lse, const Tensor* total) {
  if (!total) return kernels::masked_loss_sum(max, sumexp, target, loss_mask, lse);
  kernels::masked_loss_sum_into(max, sumexp, target, loss_mask, lse, *total);
  return 0;
}
}  // namespace

double VocabParallelCrossEntropy::forward(const Tensor& logits, const Tensor& labels, const Tensor& loss_mask,
                                          Tensor& lse, Tensor* target_out, const Tensor* total) const {
  const int64_t rows = logits.dim(0);
  Tensor max = Tensor::empty({rows}), sumexp = Tensor::empty({rows}), target = Tensor::empty({rows});
  kernels::cross_entropy_shard_stats(logits, labels, max, sumexp, target, vocab_begin_);
  if (tp_.size() > 1) {
    Tensor global_max = max.clone();
    tp_.group->all_reduce(global_max, comm::ReduceOp::Max);
    kernels::rescale_sum_exp(sumexp, max, global_max);
    tp_.group->all_reduce(sumexp);
    tp_.group->all_reduce(target);
    max = global_max;
  }
  lse = Tensor::empty({rows});
  if (target_out) *target_out = target;
  return loss_sum(max, sumexp, target, loss_mask, lse, total);
}

void VocabParallelCrossEntropy::backward(Tensor& logits, const Tensor& labels, const Tensor& lse,
                                         const Tensor& loss_mask, float grad_scale, DType round_output) const {
  const int64_t rows = logits.dim(0);
  Tensor dloss = Tensor::empty({rows});
  kernels::scale(loss_mask, grad_scale, dloss);
  kernels::cross_entropy_backward(logits, labels, lse, dloss, vocab_begin_, round_output);
}

double VocabParallelCrossEntropy::forward_backward(Tensor& logits, const Tensor& labels, const Tensor& loss_mask,
                                                   Tensor& lse, float grad_scale, DType round_output,
                                                   const Tensor* total) const {
  TESSERA_CHECK(fusable(), "the fused cross-entropy needs the whole vocabulary on one rank (tensor parallel ",
                tp_.size(), ")");
  const int64_t rows = logits.dim(0);
  Tensor max = Tensor::empty({rows}), sumexp = Tensor::empty({rows}), target = Tensor::empty({rows});
  Tensor dloss = Tensor::empty({rows});
  lse = Tensor::empty({rows});
  kernels::scale(loss_mask, grad_scale, dloss);  // as backward makes it
  kernels::cross_entropy_fused(logits, labels, dloss, max, sumexp, target, lse, round_output);
  return loss_sum(max, sumexp, target, loss_mask, lse, total);  // lse rewritten with its own bits
}

Tensor VocabParallelCrossEntropy::scores(const Tensor& logits, const Tensor& lse,
                                         const Tensor& target) const {
  const int64_t rows = logits.dim(0);
  Tensor best = Tensor::empty({1, 2 * rows});  // per row: max logit of the shard, its global id
  kernels::shard_argmax(logits, best, vocab_begin_);
  if (tp_.size() > 1) best = parallel::gather_rows(best, *tp_.group);  // [tp, 2 * rows], in vocabulary order
  Tensor out = Tensor::empty({3 * rows});
  kernels::pick_scores(best, target, lse, out);
  return out;
}

LMHead::LMHead(const ModelConfig& c, ParameterSet& params, const parallel::TensorParallelContext& tp,
               Parameter* tied_word_embeddings)
    : config_(c),
      tp_(tp),
      params_(&params),
      vocab_begin_(tp.rank() * (c.padded_vocab_size / tp.size())),
      vocab_local_(c.padded_vocab_size / tp.size()),
      begin_(params.numel()),
      final_norm_(std::make_unique<Norm>(params, "decoder.final_layernorm", c, tp.sequence_parallel)),
      loss_(tp, vocab_begin_, vocab_local_),
      distillation_(tp, vocab_begin_) {
  if (c.untie_embeddings_and_output_weights) {
    output_ = params.add(vocab_parallel_spec("output_layer.weight", c, tp));
  } else if (tied_word_embeddings) {
    output_ = tied_word_embeddings;
  } else {
    // Same name, so the same initial values as the first stage's; gradients are summed over the
    // embedding group so the two copies stay equal.
    ParameterSpec copy = vocab_parallel_spec("embedding.word_embeddings.weight", c, tp);
    copy.tied_copy = copy.shared_with_last_stage = true;
    output_ = params.add(copy);
  }
  output_->spec.gemm_weight = true;  // the output layer's GEMMs
  end_ = params.numel();
}

// This rank's vocabulary shard of the logits from the full final activation.
Tensor LMHead::logits_of(const Tensor& full, bool rounded) const {
  const int64_t rows = full.dim(0);
  Tensor logits = Tensor::empty({rows, vocab_local_});
  const GemmWeight w = gemm_weight(*params_, *output_, config_.params_dtype);
  kernels::linear_forward(full, w.values, Tensor(), logits, config_.params_dtype, rounded, w.rounded);
  return logits;
}

double LMHead::forward(const Tensor& x, LMHeadRecord& rec, Tensor* target, float fused_grad_scale,
                       const Tensor* total) const {
  rec.final_input = x;
  // The final norm's output feeds only the output layer's GEMMs: rounded once as it is made, not in each.
  const DType rounding = kernels::gemm_rounding(config_.params_dtype);
  final_norm_->forward(x, rec.final_ln, rec.final_mean, rec.final_rstd, rounding);
  rec.final_ln_rounded = rounding != DType::F32;
  rec.logits = logits_of(parallel::gather_to_tensor_parallel(rec.final_ln, tp_), rec.final_ln_rounded);
  rec.logits_hold_grad = fused_grad_scale > 0 && target == nullptr && loss_.fusable();
  if (rec.logits_hold_grad) {
    rec.fused_grad_scale = fused_grad_scale;
    // dlogits feed only the output layer's GEMMs: rounded as backward would round them.
    return loss_.forward_backward(rec.logits, rec.labels, rec.loss_mask, rec.lse, fused_grad_scale, rounding, total);
  }
  return loss_.forward(rec.logits, rec.labels, rec.loss_mask, rec.lse, target, total);
}

double LMHead::distill(LMHeadRecord& rec, const Distillation& d) const {
  TESSERA_CHECK(!rec.logits_hold_grad, "distillation: the forward fused the cross-entropy's gradient into the "
                "logits; a distilling forward must not pass a fused grad_scale");
  TESSERA_CHECK(d.teacher_logits.defined() && d.teacher_logits.shape() == rec.logits.shape(),
                "distillation: the teacher's logits are ",
                d.teacher_logits.defined() ? shape_str(d.teacher_logits.shape()) : "missing",
                ", the student's ", shape_str(rec.logits.shape()), " (the same rows and vocabulary shard)");
  rec.teacher_logits = d.teacher_logits;
  rec.kd = d.weights;
  return distillation_.forward(rec.logits, rec.teacher_logits, rec.loss_mask, rec.kd, rec.kd_lse);
}

Tensor LMHead::output_loss_backward(LMHeadRecord& rec, float grad_scale) const {
  const ModelConfig& c = config_;
  const int64_t rows = rec.logits.dim(0);
  // dlogits feed only the two GEMMs below: rounded once as they are made, for both.
  const DType rounding = kernels::gemm_rounding(c.params_dtype);
  if (rec.logits_hold_grad) {
    TESSERA_CHECK(grad_scale == rec.fused_grad_scale, "LMHead::backward: grad_scale ", grad_scale,
                  " differs from the ", rec.fused_grad_scale, " the forward fused into the logits' gradient");
    rec.logits_hold_grad = false;
  } else if (rec.teacher_logits.defined()) {
    distillation_.backward(rec.logits, rec.teacher_logits, rec.labels, rec.lse, rec.kd_lse, rec.loss_mask,
                           grad_scale, rec.kd, rounding);
    rec.teacher_logits = rec.kd_lse = Tensor();
  } else {
    loss_.backward(rec.logits, rec.labels, rec.lse, rec.loss_mask, grad_scale, rounding);
  }
  const Tensor& dlogits = rec.logits;
  const bool dlogits_rounded = rounding != DType::F32;

  // d final_ln = dlogits W (a partial sum over vocabulary shards); dW += dlogits^T final_ln.
  Tensor full = parallel::gather_to_tensor_parallel(rec.final_ln, tp_);
  Tensor dfinal = Tensor::empty({rows, c.hidden_size});
  const GemmWeight w = gemm_weight(*params_, *output_, c.params_dtype);
  const Tensor dw = output_->grad;
  const bool x_rounded = rec.final_ln_rounded;
  if (WeightGradientStore* store = deferred_weight_gradients()) {  // zero bubble: dW in the W pass
    kernels::linear_backward(dlogits, full, w.values, dfinal, Tensor(), Tensor(), c.params_dtype, x_rounded, w.rounded,
                             dlogits_rounded);
    store->defer([=, type = c.params_dtype] {
      kernels::linear_backward(dlogits, full, w.values, Tensor(), dw, Tensor(), type, x_rounded, w.rounded,
                               dlogits_rounded);
    }, {dlogits, full});
  } else {
    kernels::linear_backward(dlogits, full, w.values, dfinal, dw, Tensor(), c.params_dtype, x_rounded, w.rounded,
                             dlogits_rounded);
  }
  rec.logits = Tensor();
  full = Tensor();
  return parallel::reduce_to_input(dfinal, tp_);
}

Tensor LMHead::backward(LMHeadRecord& rec, float grad_scale, const Tensor& dfinal_extra) const {
  Tensor dfinal = output_loss_backward(rec, grad_scale);
  if (dfinal_extra.defined()) kernels::add_into(dfinal, dfinal_extra);
  Tensor dx = Tensor::zeros(rec.final_input.shape());
  final_norm_->backward(dfinal, rec.final_input, rec.final_mean, rec.final_rstd, dx);
  return dx;
}

double LMHead::output_loss(const Tensor& normed, bool rounded, LMHeadRecord& rec, const Tensor* total) const {
  rec.final_ln = normed;
  rec.final_ln_rounded = rounded;
  rec.logits = logits_of(parallel::gather_to_tensor_parallel(normed, tp_), rounded);
  return loss_.forward(rec.logits, rec.labels, rec.loss_mask, rec.lse, nullptr, total);
}

Tensor LMHead::logits(const Tensor& x) const {
  Tensor ln, mean, rstd;
  const DType rounding = kernels::gemm_rounding(config_.params_dtype);
  final_norm_->forward(x, ln, mean, rstd, rounding);
  return logits_of(parallel::gather_to_tensor_parallel(ln, tp_), rounding != DType::F32);
}

Tensor LMHead::score(const Tensor& x, const Tensor& labels) const {
  LMHeadRecord rec;
  rec.labels = labels;
  rec.loss_mask = Tensor::zeros({labels.numel()});
  Tensor target;
  forward(x, rec, &target);
  return loss_.scores(rec.logits, rec.lse, target);
}

Tensor LMHead::decode(const Tensor& x, const std::vector<int64_t>& rows) const {
  const int64_t n = static_cast<int64_t>(rows.size());
  Tensor picked = Tensor::empty({n, x.dim(1)}), ln, mean, rstd;
  for (int64_t i = 0; i < n; ++i) kernels::copy(picked.narrow(i, 1), x.narrow(rows[i], 1));
  final_norm_->forward(picked, ln, mean, rstd);
  Tensor local = Tensor::empty({n, vocab_local_});
  linear_forward(*params_, *output_, ln, Tensor(), local, config_.params_dtype);
  if (tp_.size() == 1) return local;
  // The ranks' [n, vocab / tp] column shards side by side.
  Tensor full = Tensor::empty({n, config_.padded_vocab_size});
  kernels::place_shards(parallel::gather_rows(local, *tp_.group), tp_.size(), full,
                        {{n, config_.padded_vocab_size}, 1, 0, vocab_local_});
  return full;
}

}  // namespace tessera::model
