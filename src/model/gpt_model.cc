#include "model/gpt_model.h"

#include <cstring>

#include "kernels/cross_entropy.h"
#include "kernels/dropout.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"

namespace tessera::model {
namespace {

constexpr int kEmbeddingDropoutSite = 0;

// [batch, seq] -> [seq, batch], the activation layout.
Tensor to_seq_major(const Tensor& t) {
  int64_t b = t.dim(0), s = t.dim(1);
  Tensor out = Tensor::empty({s, b}, t.dtype());
  size_t elem = dtype_size(t.dtype());
  const char* src = static_cast<const char*>(t.raw());
  char* dst = static_cast<char*>(out.raw());
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = 0; j < s; ++j) std::memcpy(dst + (j * b + i) * elem, src + (i * s + j) * elem, elem);
  return out;
}

}  // namespace

GptModel::GptModel(const GptConfig& config, ParameterSet& params) : config_(config) {
  const GptConfig& c = config_;
  word_embeddings_ = params.add({"embedding.word_embeddings.weight", {c.padded_vocab_size, c.hidden_size},
                                 Init::Normal, c.init_method_std, true});
  if (c.position_embedding == PositionEmbedding::LearnedAbsolute)
    position_embeddings_ = params.add({"embedding.position_embeddings.weight",
                                       {c.max_position_embeddings, c.hidden_size}, Init::Normal, c.init_method_std,
                                       true});
  for (int64_t l = 1; l <= c.num_layers; ++l) layers_.push_back(std::make_unique<TransformerLayer>(config_, l, params));
  final_norm_ = std::make_unique<Norm>(params, "decoder.final_layernorm", config_);
  if (c.untie_embeddings_and_output_weights)
    output_layer_ = params.add({"output_layer.weight", {c.padded_vocab_size, c.hidden_size}, Init::Normal,
                                c.init_method_std, true});
}

const float* GptModel::output_weight() const {
  return (output_layer_ ? output_layer_ : word_embeddings_)->value.f32();
}
float* GptModel::output_weight_grad() const { return (output_layer_ ? output_layer_ : word_embeddings_)->grad.f32(); }

Tensor GptModel::embed(GptActivations& rec, const ForwardContext& ctx) const {
  const GptConfig& c = config_;
  int64_t rows = ctx.seq * ctx.batch;
  rec.positions = Tensor::empty({ctx.seq, ctx.batch}, DType::I32);
  for (int64_t t = 0; t < rows; ++t) rec.positions.i32()[t] = static_cast<int32_t>(t / ctx.batch);
  Tensor x = Tensor::empty({rows, c.hidden_size});
  kernels::embedding_forward(rec.tokens.i32(), rec.positions.i32(), word_embeddings_->value.f32(),
                             position_embeddings_ ? position_embeddings_->value.f32() : nullptr, x.f32(), rows,
                             c.hidden_size, 0, c.padded_vocab_size);
  if (ctx.training && c.hidden_dropout > 0.0f) {
    kernels::DropoutRegion region{ctx.seq, ctx.batch, c.hidden_size, 0, ctx.seq, ctx.sample_offset};
    kernels::dropout_forward(x.f32(), x.f32(), c.hidden_dropout, ctx.seed,
                             dropout_stream(ctx.iteration, 0, kEmbeddingDropoutSite), region);
  }
  return x;
}

double GptModel::forward(const MicroBatch& batch, const ForwardContext& ctx, GptActivations& rec) const {
  const GptConfig& c = config_;
  TESSERA_CHECK(batch.tokens.dim(0) == ctx.batch && batch.tokens.dim(1) == ctx.seq, "GptModel::forward: tokens ",
                shape_str(batch.tokens.shape()), " do not match [batch, seq] = [", ctx.batch, ", ", ctx.seq, "]");
  const int64_t rows = ctx.seq * ctx.batch;
  rec.tokens = to_seq_major(batch.tokens);
  rec.labels = to_seq_major(batch.labels);
  rec.loss_mask = to_seq_major(batch.loss_mask);
  for (int64_t t = 0; t < rows; ++t) {
    int32_t tok = rec.tokens.i32()[t], label = rec.labels.i32()[t];
    TESSERA_CHECK(tok >= 0 && tok < c.vocab_size && label >= 0 && label < c.vocab_size, "token id ",
                  (tok >= 0 && tok < c.vocab_size) ? label : tok, " is outside the vocabulary [0, ", c.vocab_size, ")");
  }

  Tensor x = embed(rec, ctx);
  rec.embedded = x;
  rec.layers.resize(layers_.size());
  for (size_t l = 0; l < layers_.size(); ++l) x = layers_[l]->forward(x, rec.positions.i32(), ctx, rec.layers[l]);

  rec.final_input = x;
  final_norm_->forward(x, rec.final_ln, rec.final_mean, rec.final_rstd);
  rec.logits = Tensor::empty({rows, c.padded_vocab_size});
  kernels::GemmArgs g;
  g.trans_b = kernels::Trans::T;
  g.m = rows, g.n = c.padded_vocab_size, g.k = c.hidden_size;
  g.a = rec.final_ln.f32(), g.lda = c.hidden_size;
  g.b = output_weight(), g.ldb = c.hidden_size;
  g.c = rec.logits.f32(), g.ldc = c.padded_vocab_size;
  kernels::gemm(g);

  Tensor losses = Tensor::empty({rows});
  rec.lse = Tensor::empty({rows});
  kernels::cross_entropy_forward(rec.logits.f32(), rec.labels.i32(), losses.f32(), rec.lse.f32(), rows,
                                 c.padded_vocab_size);
  double total = 0;
  for (int64_t t = 0; t < rows; ++t) total += static_cast<double>(losses.f32()[t]) * rec.loss_mask.f32()[t];
  return total;
}

void GptModel::backward(GptActivations& rec, const ForwardContext& ctx, float grad_scale) const {
  const GptConfig& c = config_;
  const int64_t rows = ctx.seq * ctx.batch;
  Tensor dloss = Tensor::empty({rows});
  for (int64_t t = 0; t < rows; ++t) dloss.f32()[t] = grad_scale * rec.loss_mask.f32()[t];
  kernels::cross_entropy_backward(rec.logits.f32(), rec.labels.i32(), rec.lse.f32(), dloss.f32(), rows,
                                  c.padded_vocab_size, 0);
  const float* dlogits = rec.logits.f32();

  // d final_ln = dlogits W;  dW += dlogits^T final_ln.
  Tensor dfinal = Tensor::empty({rows, c.hidden_size});
  kernels::GemmArgs g;
  g.m = rows, g.n = c.hidden_size, g.k = c.padded_vocab_size;
  g.a = dlogits, g.lda = c.padded_vocab_size;
  g.b = output_weight(), g.ldb = c.hidden_size;
  g.c = dfinal.f32(), g.ldc = c.hidden_size;
  kernels::gemm(g);
  kernels::GemmArgs gw;
  gw.trans_a = kernels::Trans::T;
  gw.m = c.padded_vocab_size, gw.n = c.hidden_size, gw.k = rows;
  gw.a = dlogits, gw.lda = c.padded_vocab_size;
  gw.b = rec.final_ln.f32(), gw.ldb = c.hidden_size;
  gw.c = output_weight_grad(), gw.ldc = c.hidden_size;
  gw.beta = 1.0f;
  kernels::gemm(gw);
  rec.logits = Tensor();

  Tensor dx = Tensor::zeros({rows, c.hidden_size});
  final_norm_->backward(dfinal, rec.final_input, rec.final_mean, rec.final_rstd, dx);
  for (size_t l = layers_.size(); l-- > 0;) {
    dx = layers_[l]->backward(dx, rec.positions.i32(), ctx, rec.layers[l]);
    rec.layers[l] = LayerActivations();  // free as we go
  }

  if (ctx.training && c.hidden_dropout > 0.0f) {
    kernels::DropoutRegion region{ctx.seq, ctx.batch, c.hidden_size, 0, ctx.seq, ctx.sample_offset};
    kernels::dropout_backward(dx.f32(), dx.f32(), c.hidden_dropout, ctx.seed,
                              dropout_stream(ctx.iteration, 0, kEmbeddingDropoutSite), region);
  }
  kernels::embedding_backward(rec.tokens.i32(), rec.positions.i32(), dx.f32(), word_embeddings_->grad.f32(),
                              position_embeddings_ ? position_embeddings_->grad.f32() : nullptr, rows,
                              c.hidden_size, 0, c.padded_vocab_size);
}

Tensor GptModel::forward_logits(const Tensor& tokens) const {
  GptActivations rec;
  ForwardContext ctx;
  ctx.training = false;
  ctx.batch = tokens.dim(0);
  ctx.seq = tokens.dim(1);
  MicroBatch mb{tokens, tokens, Tensor::zeros(tokens.shape()), 0};
  forward(mb, ctx, rec);
  int64_t v = config_.padded_vocab_size;
  Tensor out = Tensor::empty({ctx.batch, v});
  for (int64_t b = 0; b < ctx.batch; ++b)
    std::memcpy(out.f32() + b * v, rec.logits.f32() + ((ctx.seq - 1) * ctx.batch + b) * v, v * sizeof(float));
  return out;
}

}  // namespace tessera::model
