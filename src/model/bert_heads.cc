#include "model/bert_heads.h"

#include "kernels/activations.h"
#include "kernels/elementwise.h"
#include "kernels/linear.h"
#include "model/vocab_parallel_embedding.h"

namespace tessera::model {

int64_t BertHeadRecord::head_bytes() const {
  int64_t total = 0;
  for (const Tensor* t : {&labels, &loss_mask, &sentence_order, &final_input, &final_ln, &final_mean, &final_rstd,
                          &dense, &gelu, &transform, &transform_mean, &transform_rstd, &logits, &lse, &cls, &pooled,
                          &binary_logits, &binary_lse, &binary_mask})
    if (t->defined()) total += static_cast<int64_t>(t->nbytes());
  return total;
}

BertHeads::Linear BertHeads::replicated_linear(ParameterSet& params, const std::string& prefix, int64_t out,
                                               bool sequence_parallel_grad) {
  const ModelConfig& c = config_;
  ParameterSpec w{prefix + ".weight", {out, c.hidden_size}, Init::Normal, c.init_method_std, true};
  w.gemm_weight = true;
  w.sequence_parallel_grad = sequence_parallel_grad;
  ParameterSpec b{prefix + ".bias", {out}, Init::Zeros, 0.0f, false};
  b.sequence_parallel_grad = sequence_parallel_grad;
  Parameter* weight = params.add(w);
  return {weight, params.add(b)};
}

BertHeads::BertHeads(const ModelConfig& c, ParameterSet& params, const parallel::TensorParallelContext& tp,
                     Parameter* tied_word_embeddings)
    : config_(c),
      tp_(tp),
      params_(&params),
      vocab_begin_(tp.rank() * (c.padded_vocab_size / tp.size())),
      vocab_local_(c.padded_vocab_size / tp.size()),
      begin_(params.numel()),
      lm_loss_(tp, vocab_begin_, vocab_local_) {
  TESSERA_CHECK(!c.untie_embeddings_and_output_weights,
                "BERT ties its output layer to the word embeddings: --untie-embeddings-and-output-weights is "
                "not supported for it");
  final_norm_ = std::make_unique<Norm>(params, "encoder.final_layernorm", c, tp.sequence_parallel);
  // Megatron-Core's BertModel names: lm_head.dense, lm_head.layer_norm, output_layer.bias.
  dense_ = replicated_linear(params, "lm_head.dense", c.hidden_size, tp.sequence_parallel);
  transform_norm_ = std::make_unique<Norm>(params, "lm_head.layer_norm", c, tp.sequence_parallel);
  if (tied_word_embeddings) {
    output_ = tied_word_embeddings;
  } else {
    ParameterSpec copy = vocab_parallel_spec("embedding.word_embeddings.weight", c, tp);
    copy.tied_copy = copy.shared_with_last_stage = true;
    output_ = params.add(copy);
  }
  output_->spec.gemm_weight = true;
  ParameterSpec bias = vocab_parallel_spec("output_layer.bias", c, tp);
  bias.shape = {vocab_local_};
  if (bias.sharding.sharded()) bias.sharding = {{c.padded_vocab_size}, {c.padded_vocab_size}, 0, vocab_begin_, vocab_local_};
  bias.init = Init::Zeros;
  bias.weight_decay = false;
  output_bias_ = params.add(bias);
  if (c.bert_binary_head) {
    pooler_ = replicated_linear(params, "pooler.dense", c.hidden_size, false);
    binary_ = replicated_linear(params, "binary_head", 2, false);
  }
  end_ = params.numel();
}

void BertHeads::linear_forward(const Linear& l, const Tensor& x, const Tensor& y) const {
  const GemmWeight w = gemm_weight(*params_, *l.weight, config_.params_dtype);
  kernels::linear_forward(x, w.values, l.bias->value, y, config_.params_dtype, false, w.rounded);
}

void BertHeads::linear_backward(const Linear& l, const Tensor& dy, const Tensor& x, const Tensor& dx) const {
  const GemmWeight w = gemm_weight(*params_, *l.weight, config_.params_dtype);
  kernels::linear_backward(dy, x, w.values, dx, l.weight->grad, l.bias->grad, config_.params_dtype, false, w.rounded);
}

void BertHeads::forward(const Tensor& x, const ForwardContext& ctx, BertHeadRecord& rec, LossSums& losses) const {
  const ModelConfig& c = config_;
  const int64_t local_rows = x.dim(0), h = c.hidden_size;
  rec.final_input = x;
  final_norm_->forward(x, rec.final_ln, rec.final_mean, rec.final_rstd);

  // Masked LM: the transform on this rank's rows, then logits over this rank's vocabulary shard.
  rec.dense = Tensor::empty({local_rows, h});
  linear_forward(dense_, rec.final_ln, rec.dense);
  rec.gelu = Tensor::empty({local_rows, h});
  kernels::gelu_forward(rec.dense, rec.gelu);
  transform_norm_->forward(rec.gelu, rec.transform, rec.transform_mean, rec.transform_rstd);
  Tensor full = parallel::gather_to_tensor_parallel(rec.transform, tp_);
  rec.logits = Tensor::empty({full.dim(0), vocab_local_});
  const GemmWeight w = gemm_weight(*params_, *output_, c.params_dtype);
  kernels::linear_forward(full, w.values, output_bias_->value, rec.logits, c.params_dtype, false, w.rounded);
  losses.lm += lm_loss_.forward(rec.logits, rec.labels, rec.loss_mask, rec.lse);
  if (!c.bert_binary_head) return;

  // Sentence order: the [CLS] rows (s = 0, the first `batch` rows of the [seq, batch] layout, on the
  // first sequence shard), pooled, then two logits per sample.
  rec.cls = parallel::gather_to_tensor_parallel(rec.final_ln, tp_).narrow(0, ctx.batch).clone();
  Tensor pre = Tensor::empty({ctx.batch, h});
  linear_forward(pooler_, rec.cls, pre);
  rec.pooled = Tensor::empty({ctx.batch, h});
  kernels::tanh_forward(pre, rec.pooled);
  rec.binary_logits = Tensor::empty({ctx.batch, 2});
  linear_forward(binary_, rec.pooled, rec.binary_logits);
  rec.binary_mask = Tensor::empty({ctx.batch});
  rec.binary_mask.fill_(1.0f);
  const VocabParallelCrossEntropy two_way(parallel::TensorParallelContext::single_process(), 0, 2);
  losses.add_auxiliary("sop loss", two_way.forward(rec.binary_logits, rec.sentence_order, rec.binary_mask,
                                                   rec.binary_lse) * ctx.per_sample_loss_weight);
}

Tensor BertHeads::backward(BertHeadRecord& rec, const ForwardContext& ctx, float grad_scale) const {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size, local_rows = rec.final_ln.dim(0);
  Tensor dfinal_ln = Tensor::zeros({local_rows, h});

  if (c.bert_binary_head) {
    const VocabParallelCrossEntropy two_way(parallel::TensorParallelContext::single_process(), 0, 2);
    two_way.backward(rec.binary_logits, rec.sentence_order, rec.binary_lse, rec.binary_mask,
                     grad_scale * static_cast<float>(ctx.per_sample_loss_weight), DType::F32);
    Tensor dpooled = Tensor::empty({ctx.batch, h});
    linear_backward(binary_, rec.binary_logits, rec.pooled, dpooled);
    kernels::tanh_backward(rec.pooled, dpooled, dpooled);
    Tensor dcls = Tensor::empty({ctx.batch, h});
    linear_backward(pooler_, dpooled, rec.cls, dcls);
    // Every rank computed the same [CLS] gradient: it joins the rows of the rank that holds s = 0.
    if (!tp_.sequence_parallel || tp_.rank() == 0) kernels::add_into(dfinal_ln.narrow(0, ctx.batch), dcls);
  }

  lm_loss_.backward(rec.logits, rec.labels, rec.lse, rec.loss_mask, grad_scale, DType::F32);
  Tensor full = parallel::gather_to_tensor_parallel(rec.transform, tp_);
  Tensor dfull = Tensor::empty({full.dim(0), h});
  const GemmWeight w = gemm_weight(*params_, *output_, c.params_dtype);
  kernels::linear_backward(rec.logits, full, w.values, dfull, output_->grad, output_bias_->grad, c.params_dtype,
                           false, w.rounded);
  rec.logits = Tensor();
  full = Tensor();
  Tensor dtransform = parallel::reduce_to_input(dfull, tp_);  // summed over the vocabulary shards
  dfull = Tensor();
  Tensor dgelu = Tensor::zeros({local_rows, h});
  transform_norm_->backward(dtransform, rec.gelu, rec.transform_mean, rec.transform_rstd, dgelu);
  kernels::gelu_backward(rec.dense, dgelu, dgelu);
  Tensor ddense_in = Tensor::empty({local_rows, h});
  linear_backward(dense_, dgelu, rec.final_ln, ddense_in);
  kernels::add_into(dfinal_ln, ddense_in);

  Tensor dx = Tensor::zeros(rec.final_input.shape());
  final_norm_->backward(dfinal_ln, rec.final_input, rec.final_mean, rec.final_rstd, dx);
  return dx;
}

}  // namespace tessera::model
