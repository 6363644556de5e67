#include "model/gpt_model.h"

#include <cmath>
#include <cstring>

#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"
#include "kernels/precision.h"
#include "kernels/linear.h"

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

// A [vocab, hidden] weight split by vocabulary rows over the tensor group.
ParameterSpec vocab_parallel_spec(const std::string& name, const ModelConfig& c,
                                  const parallel::TensorParallelContext& tp) {
  int64_t local = c.padded_vocab_size / tp.size();
  ParameterSpec spec{name, {local, c.hidden_size}, Init::Normal, c.init_method_std, true};
  spec.vocab_rows = true;
  if (tp.size() > 1) {
    Shape full{c.padded_vocab_size, c.hidden_size};
    spec.sharding = {full, full, 0, tp.rank() * local, local};
  }
  return spec;
}

}  // namespace

int64_t GptActivations::layer_bytes() const {
  int64_t total = 0;
  for (const LayerActivations& l : layers) total += l.bytes();
  return total;
}

int64_t GptActivations::bytes() const {
  int64_t total = layer_bytes();
  // doc_start is the caller's micro-batch tensor, shared rather than copied, so it is not counted here.
  for (const Tensor* t : {&tokens, &labels, &loss_mask, &positions, &final_input, &final_ln, &final_mean, &final_rstd,
                          &logits, &lse})
    if (t->defined()) total += static_cast<int64_t>(t->nbytes());
  return total;
}

GptModel::GptModel(const ModelConfig& config, ParameterSet& params, const parallel::TensorParallelContext& tp,
                   const ModelChunk& chunk)
    : config_(config), tp_(tp), params_(&params), chunk_(chunk) {
  const ModelConfig& c = config_;
  if (chunk_.num_layers < 0) chunk_.num_layers = c.num_layers - chunk_.first_layer;
  TESSERA_CHECK(chunk_.first_layer >= 0 && chunk_.first_layer + chunk_.num_layers <= c.num_layers,
                "model chunk of layers [", chunk_.first_layer, ", ", chunk_.first_layer + chunk_.num_layers,
                ") is outside the model's ", c.num_layers, " layers");
  TESSERA_CHECK(c.padded_vocab_size % tp.size() == 0, "padded vocabulary ", c.padded_vocab_size,
                " does not split over ", tp.size(), " tensor-parallel ranks");
  vocab_local_ = c.padded_vocab_size / tp.size();
  vocab_begin_ = tp.rank() * vocab_local_;
  first_offset_ = params.numel();
  if (chunk_.pre_process) {
    ParameterSpec words = vocab_parallel_spec("embedding.word_embeddings.weight", c, tp);
    words.shared_with_last_stage = !c.untie_embeddings_and_output_weights && !chunk_.post_process;
    word_embeddings_ = params.add(words);
    if (c.position_embedding == PositionEmbedding::LearnedAbsolute)
      position_embeddings_ = params.add({"embedding.position_embeddings.weight",
                                         {c.max_position_embeddings, c.hidden_size}, Init::Normal,
                                         c.init_method_std, true});
  }
  for (int64_t l = chunk_.first_layer; l < chunk_.first_layer + chunk_.num_layers; ++l) {
    layer_offsets_.push_back(params.numel());
    layers_.push_back(std::make_unique<TransformerLayer>(config_, l + 1, params, tp));
  }
  end_offset_ = params.numel();
  if (!chunk_.post_process) return;
  final_norm_offset_ = params.numel();
  final_norm_ = std::make_unique<Norm>(params, "decoder.final_layernorm", config_, tp.sequence_parallel);
  if (c.untie_embeddings_and_output_weights) {
    output_layer_ = params.add(vocab_parallel_spec("output_layer.weight", c, tp));
  } else if (!chunk_.pre_process) {
    // Same name, so the same initial values as the first stage's; gradients are summed over the
    // embedding group so the two copies stay equal.
    ParameterSpec copy = vocab_parallel_spec("embedding.word_embeddings.weight", c, tp);
    copy.tied_copy = copy.shared_with_last_stage = true;
    word_embeddings_ = params.add(copy);
  }
  (output_layer_ ? output_layer_ : word_embeddings_)->spec.gemm_weight = true;  // the output layer's GEMMs
  end_offset_ = params.numel();
}

const Parameter& GptModel::output_parameter() const { return *(output_layer_ ? output_layer_ : word_embeddings_); }
const float* GptModel::output_weight() const { return output_parameter().value.f32(); }
float* GptModel::output_weight_grad() const { return (output_layer_ ? output_layer_ : word_embeddings_)->grad.f32(); }

// Vocab-parallel embedding: each rank looks up the ids of its vocabulary shard (zeros elsewhere), the
// rank-0 shard adds the position embedding, and the sum over the tensor group is the embedding (or
// its sequence shard, reduce-scattered, under sequence parallelism).
Tensor GptModel::embed(GptActivations& rec, const ForwardContext& ctx) const {
  const ModelConfig& c = config_;
  int64_t rows = ctx.seq * ctx.batch;
  Tensor partial = Tensor::empty({rows, c.hidden_size});
  const float* wpe = position_embeddings_ && tp_.rank() == 0 ? position_embeddings_->value.f32() : nullptr;
  kernels::embedding_forward(rec.tokens.i32(), rec.positions.i32(), word_embeddings_->value.f32(), wpe,
                             partial.f32(), rows, c.hidden_size, vocab_begin_, vocab_begin_ + vocab_local_);
  Tensor x = parallel::reduce_to_input(partial, tp_);
  kernels::round_to(c.params_dtype, x.f32(), x.f32(), x.numel());  // a 16-bit embedding's output
  if (ctx.training && c.hidden_dropout > 0.0f)
    kernels::dropout_forward(x.f32(), x.f32(), c.hidden_dropout, ctx.seed,
                             dropout_stream(ctx.iteration, 0, kEmbeddingDropoutSite),
                             residual_region(ctx, c.hidden_size, tp_));
  return x;
}

double GptModel::forward(const MicroBatch& batch, const ForwardContext& ctx, GptActivations& rec) const {
  TESSERA_CHECK(chunk_.pre_process && chunk_.post_process, "GptModel::forward needs the whole model; this "
                "object holds a pipeline chunk (use forward_chunk)");
  double loss = 0;
  forward_chunk(batch, Tensor(), ctx, rec, &loss);
  return loss;
}

void GptModel::backward(GptActivations& rec, const ForwardContext& ctx, float grad_scale,
                        const std::function<void(int64_t)>& grads_final_from) const {
  backward_chunk(rec, Tensor(), ctx, grad_scale, grads_final_from);
}

Tensor GptModel::forward_chunk(const MicroBatch& batch, const Tensor& input, const ForwardContext& context,
                               GptActivations& rec, double* loss_sum,
                               const std::function<void(int64_t)>& params_needed_below) const {
  const ModelConfig& c = config_;
  // Announces the use of layer l's parameters (l = -1: the embedding's; l = layers: the head's).
  auto need_params_of = [&](int64_t l) {
    if (!params_needed_below) return;
    const int64_t layers = static_cast<int64_t>(layer_offsets_.size());
    int64_t end = end_offset_;                                              // the head: all of the chunk
    if (l + 1 < layers) end = layer_offsets_[l + 1];                        // up to the next layer
    else if (l < layers && chunk_.post_process) end = final_norm_offset_;  // up to the head
    params_needed_below(end);
  };
  rec.doc_start = batch.doc_start;
  ForwardContext ctx = context;
  ctx.doc_start = rec.doc_start.defined() ? rec.doc_start.i32() : nullptr;
  TESSERA_CHECK(batch.tokens.dim(0) == ctx.batch && batch.tokens.dim(1) == ctx.seq, "GptModel::forward: tokens ",
                shape_str(batch.tokens.shape()), " do not match [batch, seq] = [", ctx.batch, ", ", ctx.seq, "]");
  const int64_t rows = ctx.seq * ctx.batch;
  rec.positions = batch.positions.defined() ? to_seq_major(batch.positions) : Tensor::empty({ctx.seq, ctx.batch}, DType::I32);
  if (!batch.positions.defined())
    for (int64_t t = 0; t < rows; ++t) rec.positions.i32()[t] = static_cast<int32_t>(t / ctx.batch);
  Tensor x;
  if (chunk_.pre_process) {
    rec.tokens = to_seq_major(batch.tokens);
    for (int64_t t = 0; t < rows; ++t) {
      int32_t tok = rec.tokens.i32()[t];
      TESSERA_CHECK(tok >= 0 && tok < c.vocab_size, "token id ", tok, " is outside the vocabulary [0, ",
                    c.vocab_size, ")");
    }
    need_params_of(-1);
    x = embed(rec, ctx);
  } else {
    const int64_t local_rows = tp_.sequence_parallel ? rows / tp_.size() : rows;
    TESSERA_CHECK(input.defined() && input.shape() == Shape({local_rows, c.hidden_size}),
                  "GptModel::forward_chunk: the input activation is ",
                  input.defined() ? shape_str(input.shape()) : "missing", ", expected [", local_rows, ", ",
                  c.hidden_size, "]");
    x = input;
  }
  rec.layers.resize(layers_.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    need_params_of(static_cast<int64_t>(l));
    const int64_t group = recompute_group_start(static_cast<int64_t>(l));
    if (group < 0) {
      x = layers_[l]->forward(x, rec.positions.i32(), ctx, rec.layers[l]);
      continue;
    }
    if (group == static_cast<int64_t>(l)) rec.layers[l].input = x;  // all that the group keeps
    LayerActivations discarded;
    x = layers_[l]->forward(x, rec.positions.i32(), ctx, discarded);
  }
  if (!chunk_.post_process) return x;

  rec.labels = to_seq_major(batch.labels);
  rec.loss_mask = to_seq_major(batch.loss_mask);
  for (int64_t t = 0; t < rows; ++t) {
    int32_t label = rec.labels.i32()[t];
    TESSERA_CHECK(label >= 0 && label < c.vocab_size, "label id ", label, " is outside the vocabulary [0, ",
                  c.vocab_size, ")");
  }
  need_params_of(static_cast<int64_t>(layers_.size()));
  rec.final_input = x;
  // The final norm's output feeds only the output layer's GEMMs: rounded once as it is made, not in each.
  final_norm_->forward(x, rec.final_ln, rec.final_mean, rec.final_rstd, kernels::gemm_rounding(c.params_dtype));
  rec.final_ln_rounded = kernels::gemm_rounding(c.params_dtype) != DType::F32;
  // Output layer: this rank's vocabulary shard of the logits from the full final activation.
  Tensor full = parallel::gather_to_tensor_parallel(rec.final_ln, tp_);
  rec.logits = Tensor::empty({rows, vocab_local_});
  const GemmWeight w = gemm_weight(*params_, output_parameter(), c.params_dtype);
  kernels::GemmArgs g;
  g.trans_b = kernels::Trans::T;
  g.m = rows, g.n = vocab_local_, g.k = c.hidden_size;
  g.a = full.f32(), g.lda = c.hidden_size;
  g.b = w.values, g.ldb = c.hidden_size;
  g.c = rec.logits.f32(), g.ldc = vocab_local_;
  g.input_type = c.params_dtype;
  g.a_rounded = rec.final_ln_rounded, g.b_rounded = w.rounded;
  kernels::gemm(g);

  // Vocab-parallel cross-entropy: no rank holds all logits; the max, the sum of exponentials and the
  // target logit are reduced over the tensor group.
  Tensor max = Tensor::empty({rows}), sumexp = Tensor::empty({rows}), target = Tensor::empty({rows});
  kernels::cross_entropy_shard_stats(rec.logits.f32(), rec.labels.i32(), max.f32(), sumexp.f32(), target.f32(),
                                     rows, vocab_local_, vocab_begin_);
  if (tp_.size() > 1) {
    Tensor global_max = max.clone();
    tp_.group->all_reduce(global_max, comm::ReduceOp::Max);
    for (int64_t t = 0; t < rows; ++t) sumexp.f32()[t] *= std::exp(max.f32()[t] - global_max.f32()[t]);
    tp_.group->all_reduce(sumexp);
    tp_.group->all_reduce(target);
    max = global_max;
  }
  rec.lse = Tensor::empty({rows});
  double total = 0;
  for (int64_t t = 0; t < rows; ++t) {
    float lse = max.f32()[t] + std::log(sumexp.f32()[t]);
    rec.lse.f32()[t] = lse;
    total += static_cast<double>(lse - target.f32()[t]) * rec.loss_mask.f32()[t];
  }
  *loss_sum += total;
  return Tensor();
}

Tensor GptModel::backward_chunk(GptActivations& rec, const Tensor& doutput, const ForwardContext& context,
                                float grad_scale, const std::function<void(int64_t)>& grads_final_from) const {
  ForwardContext ctx = context;
  ctx.doc_start = rec.doc_start.defined() ? rec.doc_start.i32() : nullptr;
  auto final_from = [&](int64_t offset) {
    if (grads_final_from) grads_final_from(offset);
  };
  const ModelConfig& c = config_;
  const int64_t rows = ctx.seq * ctx.batch;
  Tensor dx;
  if (chunk_.post_process) {
    Tensor dloss = Tensor::empty({rows});
    for (int64_t t = 0; t < rows; ++t) dloss.f32()[t] = grad_scale * rec.loss_mask.f32()[t];
    // dlogits feed only the two GEMMs below: rounded once as they are made, for both.
    kernels::cross_entropy_backward(rec.logits.f32(), rec.labels.i32(), rec.lse.f32(), dloss.f32(), rows,
                                    vocab_local_, vocab_begin_, kernels::gemm_rounding(c.params_dtype));
    const float* dlogits = rec.logits.f32();
    const bool dlogits_rounded = kernels::gemm_rounding(c.params_dtype) != DType::F32;

    // d final_ln = dlogits W (a partial sum over vocabulary shards); dW += dlogits^T final_ln.
    Tensor full = parallel::gather_to_tensor_parallel(rec.final_ln, tp_);
    Tensor dfinal = Tensor::empty({rows, c.hidden_size});
    const GemmWeight w = gemm_weight(*params_, output_parameter(), c.params_dtype);
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
    gw.c = output_weight_grad(), gw.ldc = c.hidden_size;
    gw.beta = 1.0f;
    gw.input_type = c.params_dtype;
    gw.a_rounded = dlogits_rounded, gw.b_rounded = rec.final_ln_rounded;
    kernels::gemm(gw);
    rec.logits = Tensor();
    full = Tensor();
    dfinal = parallel::reduce_to_input(dfinal, tp_);

    dx = Tensor::zeros(rec.final_input.shape());
    final_norm_->backward(dfinal, rec.final_input, rec.final_mean, rec.final_rstd, dx);
    final_from(final_norm_offset_);  // and the output layer (or tied copy) above it
  } else {
    dx = doutput;
  }
  for (size_t l = layers_.size(); l-- > 0;) {
    const int64_t group = recompute_group_start(static_cast<int64_t>(l));
    if (group >= 0 && (l + 1 == layers_.size() || recompute_group_start(static_cast<int64_t>(l) + 1) != group)) {
      // Entering a recomputed group from its last layer: run its forward again from the kept input.
      Tensor y = rec.layers[group].input;
      for (size_t j = static_cast<size_t>(group); j <= l; ++j)
        y = layers_[j]->forward(y, rec.positions.i32(), ctx, rec.layers[j]);
    }
    dx = layers_[l]->backward(dx, rec.positions.i32(), ctx, rec.layers[l]);
    rec.layers[l] = LayerActivations();  // free as we go
    final_from(layer_offsets_[l]);
  }
  if (!chunk_.pre_process) {
    final_from(first_offset_);
    return dx;
  }

  if (ctx.training && c.hidden_dropout > 0.0f)
    kernels::dropout_backward(dx.f32(), dx.f32(), c.hidden_dropout, ctx.seed,
                              dropout_stream(ctx.iteration, 0, kEmbeddingDropoutSite),
                              residual_region(ctx, c.hidden_size, tp_));
  // The embedding's forward ended in a reduction over the tensor group; its backward needs the full
  // gradient on every rank (all-gathered from sequence shards under sequence parallelism).
  Tensor dfull = parallel::gather_to_tensor_parallel(dx, tp_);
  kernels::embedding_backward(rec.tokens.i32(), rec.positions.i32(), dfull.f32(), word_embeddings_->grad.f32(),
                              position_embeddings_ ? position_embeddings_->grad.f32() : nullptr, rows,
                              c.hidden_size, vocab_begin_, vocab_begin_ + vocab_local_);
  final_from(first_offset_);
  return Tensor();
}

int64_t GptModel::recompute_group_start(int64_t l) const {
  switch (recompute_.method) {
    case RecomputeMethod::None:
      return -1;
    case RecomputeMethod::Uniform:
      return l / recompute_.num_layers * recompute_.num_layers;
    case RecomputeMethod::Block:
      return l < recompute_.num_layers ? l : -1;
  }
  return -1;
}

DecodeState GptModel::start_decoding(int64_t capacity) const {
  DecodeState state;
  for (const auto& layer : layers_) state.layers.push_back(layer->make_kv_cache(capacity));
  return state;
}

Tensor GptModel::next_token_logits(const std::vector<int32_t>& tokens, DecodeState& state) const {
  TESSERA_CHECK(chunk_.pre_process && chunk_.post_process, "next_token_logits needs the whole model");
  return decode_chunk(tokens, Tensor(), state);
}

Tensor GptModel::decode_chunk(const std::vector<int32_t>& tokens, const Tensor& input, DecodeState& state) const {
  const ModelConfig& c = config_;
  const int64_t n = static_cast<int64_t>(tokens.size());
  TESSERA_CHECK(n > 0, "next_token_logits: no tokens");
  std::vector<int32_t> positions(n);
  for (int64_t i = 0; i < n; ++i) {
    TESSERA_CHECK(tokens[i] >= 0 && tokens[i] < c.vocab_size, "token id ", tokens[i],
                  " is outside the vocabulary [0, ", c.vocab_size, ")");
    positions[i] = static_cast<int32_t>(state.length + i);
  }
  TESSERA_CHECK(c.position_embedding != PositionEmbedding::LearnedAbsolute ||
                    state.length + n <= c.max_position_embeddings,
                "sequence of ", state.length + n, " tokens is longer than --max-position-embeddings=",
                c.max_position_embeddings);
  Tensor x;
  if (chunk_.pre_process) {
    x = Tensor::empty({n, c.hidden_size});
    const float* wpe = position_embeddings_ && tp_.rank() == 0 ? position_embeddings_->value.f32() : nullptr;
    kernels::embedding_forward(tokens.data(), positions.data(), word_embeddings_->value.f32(), wpe, x.f32(), n,
                               c.hidden_size, vocab_begin_, vocab_begin_ + vocab_local_);
    parallel::all_reduce_sum(x, *tp_.group);
    kernels::round_to(c.params_dtype, x.f32(), x.f32(), x.numel());
  } else {
    TESSERA_CHECK(input.defined() && input.shape() == Shape({n, c.hidden_size}), "decode_chunk: the input is ",
                  input.defined() ? shape_str(input.shape()) : "missing", ", expected [", n, ", ", c.hidden_size, "]");
    x = input;
  }
  for (size_t l = 0; l < layers_.size(); ++l)
    x = layers_[l]->forward_incremental(x, positions.data(), state.length, state.layers[l]);
  state.length += n;
  if (!chunk_.post_process) return x;

  // Only the last position's logits are needed.
  Tensor last = x.narrow(n - 1, 1), ln, mean, rstd;
  final_norm_->forward(last, ln, mean, rstd);
  Tensor local = Tensor::empty({1, vocab_local_});
  kernels::linear_forward(ln.f32(), output_weight(), nullptr, local.f32(), 1, c.hidden_size, vocab_local_,
                          c.params_dtype);
  return parallel::gather_rows(local, *tp_.group).view({c.padded_vocab_size});
}

}  // namespace tessera::model
