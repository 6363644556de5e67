#include "model/multiple_choice_model.h"

#include "kernels/activations.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/linear.h"
#include "kernels/token_layout.h"
#include "model/batch_layout.h"
#include "model/model_factory.h"

namespace tessera::model {
namespace {

// The site of the head's dropout: a "layer" past the last transformer layer.
constexpr int kHeadDropoutSite = 0;

}  // namespace

int64_t MultipleChoiceActivations::bytes() const {
  int64_t total = block.bytes();
  for (const Tensor* t : {&tokens, &positions, &token_types, &final_input, &final_ln, &final_mean, &final_rstd, &cls,
                          &pooled, &dropped, &logits, &lse, &labels, &label_mask})
    if (t->defined()) total += static_cast<int64_t>(t->nbytes());
  return total;
}

MultipleChoiceModel::MultipleChoiceModel(const ModelConfig& config, ParameterSet& params,
                                         const parallel::TensorParallelContext& tp, const ModelChunk& chunk)
    : config_(config), tp_(tp), params_(&params), chunk_(chunk) {
  const ModelConfig& c = config_;
  if (chunk_.num_layers < 0) chunk_.num_layers = c.num_layers - chunk_.first_layer;
  TESSERA_CHECK(chunk_.first_layer >= 0 && chunk_.first_layer + chunk_.num_layers <= c.num_layers,
                "model chunk of layers [", chunk_.first_layer, ", ", chunk_.first_layer + chunk_.num_layers,
                ") is outside the model's ", c.num_layers, " layers");
  TESSERA_CHECK(c.position_embedding == PositionEmbedding::LearnedAbsolute,
                "BERT uses learned absolute position embeddings (--position-embedding-type learned_absolute)");
  TESSERA_CHECK(c.num_tokentypes == 2, "the multiple-choice model has 2 token types (question, context), not ",
                c.num_tokentypes);
  if (chunk_.pre_process) embedding_.emplace(config_, params, tp, false);
  block_ = std::make_unique<TransformerBlock>(config_, chunk_.first_layer, chunk_.num_layers, params, tp,
                                              bert_layer_spec());
  if (!chunk_.post_process) return;
  head_begin_ = params.numel();
  final_norm_ = std::make_unique<Norm>(params, "encoder.final_layernorm", c, tp.sequence_parallel);
  auto linear = [&](const std::string& prefix, int64_t out, Parameter*& w, Parameter*& b) {
    ParameterSpec ws{prefix + ".weight", {out, c.hidden_size}, Init::Normal, c.init_method_std, true};
    ws.gemm_weight = true;
    w = params.add(ws);
    b = params.add({prefix + ".bias", {out}, Init::Zeros, 0.0f, false});
  };
  linear("pooler.dense", c.hidden_size, pooler_weight_, pooler_bias_);
  linear("multichoice_head", 1, head_weight_, head_bias_);
  head_end_ = params.numel();
}

void MultipleChoiceModel::linear_forward(const Parameter& w, const Parameter& b, const Tensor& x,
                                         const Tensor& y) const {
  const GemmWeight gw = gemm_weight(*params_, w, config_.params_dtype);
  kernels::linear_forward(x, gw.values, b.value, y, config_.params_dtype, false, gw.rounded);
}

void MultipleChoiceModel::linear_backward(const Parameter& w, const Parameter& b, const Tensor& dy, const Tensor& x,
                                          const Tensor& dx) const {
  const GemmWeight gw = gemm_weight(*params_, w, config_.params_dtype);
  kernels::linear_backward(dy, x, gw.values, dx, w.grad, b.grad, config_.params_dtype, false, gw.rounded);
}

kernels::DropoutRegion MultipleChoiceModel::pooled_region(const ForwardContext& ctx) const {
  return {1, ctx.batch, config_.hidden_size, 0, 1, ctx.sample_offset};
}

Tensor MultipleChoiceModel::run(const MicroBatch& batch, const Tensor& input, const ForwardContext& ctx,
                                MultipleChoiceActivations& rec, const ParamHooks& hooks) const {
  const ModelConfig& c = config_;
  check_batch_shape(batch, ctx, "MultipleChoiceModel");
  rec.padding_mask = batch.padding_mask;
  rec.positions = seq_major_positions(batch, ctx);
  Tensor x;
  if (embedding_) {
    if (hooks.params_needed_below) hooks.params_needed_below(embedding_->end_offset());
    rec.tokens = to_seq_major(batch.tokens);
    check_ids(rec.tokens, c.vocab_size, "token");
    TESSERA_CHECK(batch.token_types.defined(), "the multiple-choice model needs token types");
    rec.token_types = to_seq_major(batch.token_types);
    check_ids(rec.token_types, c.num_tokentypes, "token type", "the token types");
    x = embedding_->forward(rec.tokens, rec.positions, rec.token_types, ctx);
  } else {
    x = checked_chunk_input(input, ctx, c.hidden_size, tp_, "MultipleChoiceModel");
  }
  x = block_->forward(x, rec.positions, ctx, rec.block, hooks);
  if (!chunk_.post_process) return x;

  // The choice labels, one per question.
  TESSERA_CHECK(batch.choice_label.defined() && batch.choice_label.numel() > 0 &&
                    ctx.batch % batch.choice_label.numel() == 0,
                "the multiple-choice model needs a label per question, the ", ctx.batch,
                " rows being the questions' choices in turn (got ",
                batch.choice_label.defined() ? batch.choice_label.numel() : 0, " labels)");
  const int64_t questions = batch.choice_label.numel(), choices = ctx.batch / questions, h = c.hidden_size;
  rec.labels = batch.choice_label;
  check_ids(rec.labels, choices, "choice label", "the choices");
  if (hooks.params_needed_below) hooks.params_needed_below(head_end_);

  rec.final_input = x;
  final_norm_->forward(x, rec.final_ln, rec.final_mean, rec.final_rstd);
  // [CLS] (s = 0) is the first `rows` rows of the [seq, rows] layout, on the first sequence shard.
  rec.cls = parallel::gather_to_tensor_parallel(rec.final_ln, tp_).narrow(0, ctx.batch).clone();
  Tensor pre = Tensor::empty({ctx.batch, h});
  linear_forward(*pooler_weight_, *pooler_bias_, rec.cls, pre);
  rec.pooled = Tensor::empty({ctx.batch, h});
  kernels::tanh_forward(pre, rec.pooled);
  rec.dropped = rec.pooled;
  if (ctx.training && c.hidden_dropout > 0.0f) {
    rec.dropped = Tensor::empty({ctx.batch, h});
    kernels::dropout_forward(rec.pooled, rec.dropped, c.hidden_dropout, ctx.seed,
                             dropout_stream(ctx.iteration, c.num_layers + 1, kHeadDropoutSite), pooled_region(ctx));
  }
  Tensor logits = Tensor::empty({ctx.batch, 1});
  linear_forward(*head_weight_, *head_bias_, rec.dropped, logits);
  rec.logits = logits.view({questions, choices});  // [b * c, 1] -> [b, c]
  rec.label_mask = Tensor::empty({questions});
  rec.label_mask.fill_(1.0f);
  return x;
}

Tensor MultipleChoiceModel::forward(const MicroBatch& batch, const Tensor& input, const ForwardContext& context,
                                    ChunkRecord& record, LossSums& losses, const ParamHooks& hooks) const {
  auto& rec = static_cast<MultipleChoiceActivations&>(record);
  ForwardContext ctx = context;
  ctx.padding_mask = batch.padding_mask;
  ctx.losses = &losses;
  Tensor x = run(batch, input, ctx, rec, hooks);
  if (!chunk_.post_process) return x;
  const int64_t choices = rec.logits.dim(1);
  const VocabParallelCrossEntropy loss(parallel::TensorParallelContext::single_process(), 0, choices);
  losses.lm += loss.forward(rec.logits, rec.labels, rec.label_mask, rec.lse);
  return Tensor();
}

Tensor MultipleChoiceModel::backward(ChunkRecord& record, const Tensor& doutput, const ForwardContext& context,
                                     float grad_scale, const ParamHooks& hooks) const {
  auto& rec = static_cast<MultipleChoiceActivations&>(record);
  const ModelConfig& c = config_;
  ForwardContext ctx = context;
  ctx.padding_mask = rec.padding_mask;
  ctx.losses = nullptr;
  ctx.grad_scale = grad_scale;
  auto final_from = [&](int64_t offset) {
    if (hooks.grads_final_from) hooks.grads_final_from(offset);
  };
  Tensor dx = doutput;
  if (chunk_.post_process) {
    const int64_t h = c.hidden_size, rows = ctx.batch;
    const VocabParallelCrossEntropy loss(parallel::TensorParallelContext::single_process(), 0, rec.logits.dim(1));
    loss.backward(rec.logits, rec.labels, rec.lse, rec.label_mask, grad_scale, DType::F32);  // in place
    Tensor ddropped = Tensor::empty({rows, h});
    linear_backward(*head_weight_, *head_bias_, rec.logits.view({rows, 1}), rec.dropped, ddropped);
    if (ctx.training && c.hidden_dropout > 0.0f)
      kernels::dropout_backward(ddropped, ddropped, c.hidden_dropout, ctx.seed,
                                dropout_stream(ctx.iteration, c.num_layers + 1, kHeadDropoutSite),
                                pooled_region(ctx));
    kernels::tanh_backward(rec.pooled, ddropped, ddropped);
    Tensor dcls = Tensor::empty({rows, h});
    linear_backward(*pooler_weight_, *pooler_bias_, ddropped, rec.cls, dcls);
    Tensor dfinal_ln = Tensor::zeros(rec.final_ln.shape());
    // Every rank computed the same [CLS] gradient: it joins the rows of the rank that holds s = 0.
    if (!tp_.sequence_parallel || tp_.rank() == 0) kernels::add_into(dfinal_ln.narrow(0, rows), dcls);
    dx = Tensor::zeros(rec.final_input.shape());
    final_norm_->backward(dfinal_ln, rec.final_input, rec.final_mean, rec.final_rstd, dx);
    final_from(head_begin_);
  }
  dx = block_->backward(dx, rec.positions, ctx, rec.block, hooks);
  if (!embedding_) return dx;
  embedding_->backward(dx, rec.tokens, rec.positions, rec.token_types, ctx);
  final_from(embedding_->begin_offset());
  return Tensor();
}

KvPool MultipleChoiceModel::make_kv_pool(int64_t, int64_t) const {
  throw Error("the multiple-choice model is a bidirectional encoder: it does not generate text");
}

Tensor MultipleChoiceModel::decode_step(const std::vector<DecodeStep>&, const Tensor&, KvPool&) const {
  throw Error("the multiple-choice model is a bidirectional encoder: it does not generate text");
}

Tensor MultipleChoiceModel::score(const MicroBatch& batch, const Tensor& input, const ForwardContext& context) const {
  MultipleChoiceActivations rec;
  ForwardContext ctx = context;
  ctx.training = false;
  ctx.padding_mask = batch.padding_mask;
  ctx.losses = nullptr;
  Tensor x = run(batch, input, ctx, rec, {});
  if (!chunk_.post_process) return x;
  const VocabParallelCrossEntropy loss(parallel::TensorParallelContext::single_process(), 0, rec.logits.dim(1));
  Tensor target;
  loss.forward(rec.logits, rec.labels, rec.label_mask, rec.lse, &target);
  return loss.scores(rec.logits, rec.lse, target);
}

void register_multiple_choice_family() {
  register_model_family(kMultipleChoiceFamily, [](const ModelConfig& c, ParameterSet& params,
                                                  const parallel::TensorParallelContext& tp, const ModelChunk& chunk) {
    return std::make_unique<MultipleChoiceModel>(c, params, tp, chunk);
  });
}

}  // namespace tessera::model
