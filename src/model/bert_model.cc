#include "model/bert_model.h"

#include "kernels/tensor_ops.h"
#include "kernels/token_layout.h"
#include "model/batch_layout.h"

namespace tessera::model {

int64_t BertActivations::bytes() const {
  int64_t total = block.bytes() + head_bytes();
  for (const Tensor* t : {&tokens, &positions, &token_types})
    if (t->defined()) total += static_cast<int64_t>(t->nbytes());
  return total;
}

BertModel::BertModel(const ModelConfig& config, ParameterSet& params, const parallel::TensorParallelContext& tp,
                     const ModelChunk& chunk)
    : config_(config), tp_(tp), chunk_(chunk) {
  const ModelConfig& c = config_;
  if (chunk_.num_layers < 0) chunk_.num_layers = c.num_layers - chunk_.first_layer;
  TESSERA_CHECK(chunk_.first_layer >= 0 && chunk_.first_layer + chunk_.num_layers <= c.num_layers,
                "model chunk of layers [", chunk_.first_layer, ", ", chunk_.first_layer + chunk_.num_layers,
                ") is outside the model's ", c.num_layers, " layers");
  TESSERA_CHECK(c.position_embedding == PositionEmbedding::LearnedAbsolute,
                "BERT uses learned absolute position embeddings (--position-embedding-type learned_absolute)");
  TESSERA_CHECK(c.num_tokentypes == (c.bert_binary_head ? 2 : 0), "BERT has ", c.bert_binary_head ? 2 : 0,
                " token types ", c.bert_binary_head ? "with" : "without", " the binary head, not ", c.num_tokentypes);
  if (chunk_.pre_process) embedding_.emplace(config_, params, tp, !chunk_.post_process);
  block_ = std::make_unique<TransformerBlock>(config_, chunk_.first_layer, chunk_.num_layers, params, tp,
                                              bert_layer_spec());
  if (chunk_.post_process) {
    Parameter* words = embedding_ ? &embedding_->word_embeddings() : nullptr;
    // ZB-V's V puts the first and the last model chunk on one rank: the LM head ties to the first chunk's
    // word embedding itself (no copy, and no sum over an embedding group), as GPT's output layer does.
    if (!embedding_ && (words = params.find("embedding.word_embeddings.weight")))
      words->spec.shared_with_last_stage = false;
    heads_.emplace(config_, params, tp, words);
  }
}

std::vector<std::string> BertModel::auxiliary_loss_names() const {
  std::vector<std::string> names = moe_loss_names(config_.moe);
  if (config_.bert_binary_head) names.insert(names.begin(), "sop loss");
  return names;
}

Parameter* BertModel::tied_word_embedding() const {
  if (embedding_) return &embedding_->word_embeddings();
  return heads_ ? &heads_->output_weight() : nullptr;
}

Tensor BertModel::chunk_input(const MicroBatch& batch, const Tensor& input, const ForwardContext& ctx,
                              BertActivations& rec) const {
  const ModelConfig& c = config_;
  check_batch_shape(batch, ctx, "BertModel");
  rec.padding_mask = batch.padding_mask;
  rec.positions = seq_major_positions(batch, ctx);
  if (embedding_) {
    rec.tokens = to_seq_major(batch.tokens);
    // Checked on the host before a GPU's upload (train/device_setup.h): no copy back per micro-batch.
    if (batch.ids_checked_below != c.vocab_size) check_ids(rec.tokens, c.vocab_size, "token");
    if (c.num_tokentypes > 0) {
      TESSERA_CHECK(batch.token_types.defined(), "BERT with the binary head needs token types");
      rec.token_types = to_seq_major(batch.token_types);
      check_ids(rec.token_types, c.num_tokentypes, "token type", "the token types");
    }
    return embedding_->forward(rec.tokens, rec.positions, rec.token_types, ctx);
  }
  return checked_chunk_input(input, ctx, c.hidden_size, tp_, "BertModel");
}

Tensor BertModel::forward(const MicroBatch& batch, const Tensor& input, const ForwardContext& context,
                          ChunkRecord& record, LossSums& losses, const ParamHooks& hooks) const {
  auto& rec = static_cast<BertActivations&>(record);
  ForwardContext ctx = context;
  ctx.padding_mask = batch.padding_mask;
  ctx.losses = &losses;
  if (embedding_ && hooks.params_needed_below) hooks.params_needed_below(embedding_->end_offset());
  Tensor x = chunk_input(batch, input, ctx, rec);
  x = block_->forward(x, rec.positions, ctx, rec.block, hooks);
  if (!heads_) return x;
  rec.labels = to_seq_major(batch.labels);
  rec.loss_mask = to_seq_major(batch.loss_mask);
  if (batch.ids_checked_below != config_.vocab_size) check_ids(rec.labels, config_.vocab_size, "label");
  if (config_.bert_binary_head) {
    TESSERA_CHECK(batch.sentence_order.defined() && batch.sentence_order.numel() == ctx.batch,
                  "BERT with the binary head needs a sentence-order label per sample");
    rec.sentence_order = batch.sentence_order;
    check_ids(rec.sentence_order, 2, "sentence-order label", "the labels");
  }
  if (hooks.params_needed_below) hooks.params_needed_below(heads_->end_offset());
  heads_->forward(x, ctx, rec, losses);
  return Tensor();
}

Tensor BertModel::backward(ChunkRecord& record, const Tensor& doutput, const ForwardContext& context, float grad_scale,
                           const ParamHooks& hooks) const {
  auto& rec = static_cast<BertActivations&>(record);
  ForwardContext ctx = context;
  ctx.padding_mask = rec.padding_mask;
  ctx.losses = nullptr;
  ctx.grad_scale = grad_scale;
  auto final_from = [&](int64_t offset) {
    if (hooks.grads_final_from) hooks.grads_final_from(offset);
  };
  Tensor dx = doutput;
  if (heads_) {
    dx = heads_->backward(rec, ctx, grad_scale);
    final_from(heads_->begin_offset());
  }
  dx = block_->backward(dx, rec.positions, ctx, rec.block, hooks);
  if (!embedding_) return dx;
  embedding_->backward(dx, rec.tokens, rec.positions, rec.token_types, ctx);
  final_from(embedding_->begin_offset());
  return Tensor();
}

KvPool BertModel::make_kv_pool(int64_t, int64_t) const {
  throw Error("BERT is a bidirectional encoder: it does not generate text token by token");
}

Tensor BertModel::decode_step(const std::vector<DecodeStep>&, const Tensor&, KvPool&) const {
  throw Error("BERT is a bidirectional encoder: it does not generate text token by token");
}

Tensor BertModel::score(const MicroBatch&, const Tensor&, const ForwardContext&) const {
  throw Error("BERT is a bidirectional encoder: it has no next-token scores for evaluation");
}

}  // namespace tessera::model
