#include "model/vocab_parallel_embedding.h"

#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/precision.h"

namespace tessera::model {
namespace {

constexpr int kEmbeddingDropoutSite = 0;  // of "layer" 0

}  // namespace

ParameterSpec vocab_parallel_spec(const std::string& name, const ModelConfig& c,
                                  const parallel::TensorParallelContext& tp) {
  TESSERA_CHECK(c.padded_vocab_size % tp.size() == 0, "padded vocabulary ", c.padded_vocab_size,
                " does not split over ", tp.size(), " tensor-parallel ranks");
  int64_t local = c.padded_vocab_size / tp.size();
  ParameterSpec spec{name, {local, c.hidden_size}, Init::Normal, c.init_method_std, true};
  spec.vocab_rows = true;
  if (tp.size() > 1) {
    Shape full{c.padded_vocab_size, c.hidden_size};
    spec.sharding = {full, full, 0, tp.rank() * local, local};
  }
  return spec;
}

ParameterSpec position_embedding_spec(const ModelConfig& c) {
  return {"embedding.position_embeddings.weight", {c.max_position_embeddings, c.hidden_size}, Init::Normal,
          c.init_method_std, true};
}

VocabParallelEmbedding::VocabParallelEmbedding(const ModelConfig& c, ParameterSet& params,
                                               const parallel::TensorParallelContext& tp, bool shared_with_last_stage,
                                               bool positions_shared_with_last_stage)
    : config_(c), tp_(tp) {
  begin_ = params.numel();
  ParameterSpec words = vocab_parallel_spec("embedding.word_embeddings.weight", c, tp);
  words.shared_with_last_stage = shared_with_last_stage;
  words_ = params.add(words);
  vocab_begin_ = tp.rank() * words_->spec.shape[0];
  vocab_end_ = vocab_begin_ + words_->spec.shape[0];
  if (c.position_embedding == PositionEmbedding::LearnedAbsolute) {
    ParameterSpec positions = position_embedding_spec(c);
    positions.shared_with_last_stage = positions_shared_with_last_stage;
    positions_ = params.add(positions);
  }
  if (c.num_tokentypes > 0)
    token_types_ = params.add({"embedding.tokentype_embeddings.weight", {c.num_tokentypes, c.hidden_size},
                               Init::Normal, c.init_method_std, true});
  end_ = params.numel();
}

Tensor VocabParallelEmbedding::lookup(const Tensor& tokens, const Tensor& positions, const Tensor& token_types) const {
  const int64_t rows = tokens.numel(), h = config_.hidden_size;
  Tensor partial = Tensor::empty({rows, h});
  const bool first = tp_.rank() == 0;  // the replicated tables are added once, before the group's sum
  const Tensor wpe = positions_ && first ? positions_->value : Tensor();
  kernels::embedding_forward(tokens, positions, words_->value, wpe, partial, vocab_begin_, vocab_end_);
  if (token_types_ && first) {
    Tensor types = Tensor::empty({rows, h});
    kernels::embedding_forward(token_types, Tensor(), token_types_->value, Tensor(), types, 0, config_.num_tokentypes);
    kernels::add_into(partial, types);
  }
  return partial;
}

Tensor VocabParallelEmbedding::forward(const Tensor& tokens, const Tensor& positions, const Tensor& token_types,
                                       const ForwardContext& ctx) const {
  const ModelConfig& c = config_;
  Tensor partial = lookup(tokens, positions, token_types);
  Tensor x = parallel::reduce_to_input(partial, tp_);
  kernels::round_to(c.params_dtype, x, x);  // a 16-bit embedding's output
  if (ctx.training && c.hidden_dropout > 0.0f)
    residual_dropout(x, c.hidden_dropout, ctx.seed, dropout_stream(ctx.iteration, 0, kEmbeddingDropoutSite), ctx,
                     c.hidden_size, tp_, /*backward=*/false);
  return x;
}

void VocabParallelEmbedding::backward(const Tensor& dy, const Tensor& tokens, const Tensor& positions,
                                      const Tensor& token_types, const ForwardContext& ctx) const {
  const ModelConfig& c = config_;
  if (ctx.training && c.hidden_dropout > 0.0f)
    residual_dropout(dy, c.hidden_dropout, ctx.seed, dropout_stream(ctx.iteration, 0, kEmbeddingDropoutSite), ctx,
                     c.hidden_size, tp_, /*backward=*/true);
  // The forward ended in a reduction over the tensor group; the backward needs the full gradient on every
  // rank (all-gathered from sequence shards under sequence parallelism).
  Tensor dfull = parallel::gather_to_tensor_parallel(dy, tp_);
  kernels::embedding_backward(tokens, positions, dfull, words_->grad, positions_ ? positions_->grad : Tensor(),
                              vocab_begin_, vocab_end_);
  if (token_types_)
    kernels::embedding_backward(token_types, Tensor(), dfull, token_types_->grad, Tensor(), 0, c.num_tokentypes);
}

Tensor VocabParallelEmbedding::decode(const Tensor& tokens, const Tensor& positions) const {
  TESSERA_CHECK(!token_types_, "incremental decoding of a model with token types is not supported");
  Tensor x = lookup(tokens, positions, Tensor());
  parallel::all_reduce_sum(x, *tp_.group);
  kernels::round_to(config_.params_dtype, x, x);
  return x;
}

}  // namespace tessera::model
