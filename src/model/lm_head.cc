#include "model/lm_head.h"

#include "kernels/cross_entropy.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/linear.h"
#include "kernels/precision.h"
#include "kernels/vocab_parallel_loss.h"
#include "model/vocab_parallel_embedding.h"

namespace tessera::model {

int64_t LMHeadRecord::head_bytes() const {
  int64_t total = 0;
  for (const Tensor* t : {&labels, &loss_mask, &final_input, &final_ln, &final_mean, &final_rstd, &logits, &lse})
    if (t->defined()) total += static_cast<int64_t>(t->nbytes());
  return total;
}

double VocabParallelCrossEntropy::forward(const Tensor& logits, const Tensor& labels, const Tensor& loss_mask,
                                          Tensor& lse, Tensor* target_out) const {
  const int64_t rows = logits.dim(0);
  Tensor max = Tensor::empty({rows}), sumexp = Tensor::empty({rows}), target = Tensor::empty({rows});
  kernels::cross_entropy_shard_stats(logits.f32(), labels.i32(), max.f32(), sumexp.f32(), target.f32(), rows,
                                     vocab_local_, vocab_begin_);
  if (tp_.size() > 1) {
    Tensor global_max = max.clone();
    tp_.group->all_reduce(global_max, comm::ReduceOp::Max);
    kernels::rescale_sum_exp(sumexp.f32(), max.f32(), global_max.f32(), rows);
    tp_.group->all_reduce(sumexp);
    tp_.group->all_reduce(target);
    max = global_max;
  }
  lse = Tensor::empty({rows});
  if (target_out) *target_out = target;
  return kernels::masked_loss_sum(max.f32(), sumexp.f32(), target.f32(), loss_mask.f32(), lse.f32(), rows);
}

void VocabParallelCrossEntropy::backward(Tensor& logits, const Tensor& labels, const Tensor& lse,
                                         const Tensor& loss_mask, float grad_scale, DType round_output) const {
  const int64_t rows = logits.dim(0);
  Tensor dloss = Tensor::empty({rows});
  kernels::scale(loss_mask.f32(), grad_scale, dloss.f32(), rows);
  kernels::cross_entropy_backward(logits.f32(), labels.i32(), lse.f32(), dloss.f32(), rows, vocab_local_,
                                  vocab_begin_, round_output);
}

Tensor VocabParallelCrossEntropy::scores(const Tensor& logits, const Tensor& lse,
                                         const Tensor& target) const {
  const int64_t rows = logits.dim(0);
  Tensor best = Tensor::empty({1, 2 * rows});  // per row: max logit of the shard, its global id
  kernels::shard_argmax(logits.f32(), best.f32(), rows, vocab_local_, vocab_begin_);
  if (tp_.size() > 1) best = parallel::gather_rows(best, *tp_.group);  // [tp, 2 * rows], in vocabulary order
  Tensor out = Tensor::empty({3 * rows});
  kernels::pick_scores(best.f32(), best.dim(0), target.f32(), lse.f32(), out.f32(), rows);
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
      loss_(tp, vocab_begin_, vocab_local_) {
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
  kernels::GemmArgs g;
  g.trans_b = kernels::Trans::T;
  g.m = rows, g.n = vocab_local_, g.k = config_.hidden_size;
  g.a = full.f32(), g.lda = config_.hidden_size;
  g.b = w.values, g.ldb = config_.hidden_size;
  g.c = logits.f32(), g.ldc = vocab_local_;
  g.input_type = config_.params_dtype;
  g.a_rounded = rounded, g.b_rounded = w.rounded;
  kernels::gemm(g);
  return logits;
}

double LMHead::forward(const Tensor& x, LMHeadRecord& rec, Tensor* target) const {
  rec.final_input = x;
  // The final norm's output feeds only the output layer's GEMMs: rounded once as it is made, not in each.
  const DType rounding = kernels::gemm_rounding(config_.params_dtype);
  final_norm_->forward(x, rec.final_ln, rec.final_mean, rec.final_rstd, rounding);
  rec.final_ln_rounded = rounding != DType::F32;
  rec.logits = logits_of(parallel::gather_to_tensor_parallel(rec.final_ln, tp_), rec.final_ln_rounded);
  return loss_.forward(rec.logits, rec.labels, rec.loss_mask, rec.lse, target);
}

Tensor LMHead::backward(LMHeadRecord& rec, float grad_scale) const {
  const ModelConfig& c = config_;
  const int64_t rows = rec.logits.dim(0);
  // dlogits feed only the two GEMMs below: rounded once as they are made, for both.
  const DType rounding = kernels::gemm_rounding(c.params_dtype);
  loss_.backward(rec.logits, rec.labels, rec.lse, rec.loss_mask, grad_scale, rounding);
  const float* dlogits = rec.logits.f32();
  const bool dlogits_rounded = rounding != DType::F32;

  // d final_ln = dlogits W (a partial sum over vocabulary shards); dW += dlogits^T final_ln.
  Tensor full = parallel::gather_to_tensor_parallel(rec.final_ln, tp_);
  Tensor dfinal = Tensor::empty({rows, c.hidden_size});
  const GemmWeight w = gemm_weight(*params_, *output_, c.params_dtype);
  kernels::GemmArgs g;
  g.m = rows, g.n = c.hidden_size, g.k = vocab_local_;
  g.a = dlogits, g.lda = vocab_local_;
  g.b = w.values, g.ldb = c.hidden_size;
  g.c = dfinal.f32(), g.ldc = c.hidden_size;
  g.input_type = c.params_dtype;
  g.a_rounded = dlogits_rounded, g.b_rounded = w.rounded;
  kernels::gemm(g);
  kernels::GemmArgs gw;
  gw.trans_a = kernels::Trans::T;
  gw.m = vocab_local_, gw.n = c.hidden_size, gw.k = rows;
  gw.a = dlogits, gw.lda = vocab_local_;
  gw.b = full.f32(), gw.ldb = c.hidden_size;
  gw.c = output_->grad.f32(), gw.ldc = c.hidden_size;
  gw.beta = 1.0f;
  gw.input_type = c.params_dtype;
  gw.a_rounded = dlogits_rounded, gw.b_rounded = rec.final_ln_rounded;
  kernels::gemm(gw);
  rec.logits = Tensor();
  full = Tensor();
  dfinal = parallel::reduce_to_input(dfinal, tp_);

  Tensor dx = Tensor::zeros(rec.final_input.shape());
  final_norm_->backward(dfinal, rec.final_input, rec.final_mean, rec.final_rstd, dx);
  return dx;
}

Tensor LMHead::score(const Tensor& x, const Tensor& labels) const {
  LMHeadRecord rec;
  rec.labels = labels;
  rec.loss_mask = Tensor::zeros({labels.numel()});
  Tensor target;
  forward(x, rec, &target);
  return loss_.scores(rec.logits, rec.lse, target);
}

Tensor LMHead::decode(const Tensor& x) const {
  const int64_t n = x.dim(0);
  Tensor last = x.narrow(n - 1, 1), ln, mean, rstd;
  final_norm_->forward(last, ln, mean, rstd);
  Tensor local = Tensor::empty({1, vocab_local_});
  kernels::linear_forward(ln.f32(), output_->value.f32(), nullptr, local.f32(), 1, config_.hidden_size, vocab_local_,
                          config_.params_dtype);
  return parallel::gather_rows(local, *tp_.group).view({config_.padded_vocab_size});
}

}  // namespace tessera::model
