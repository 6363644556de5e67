#include "model/gpt_model.h"

#include "kernels/tensor_ops.h"
#include "kernels/token_layout.h"
#include "kernels/vocab_parallel_loss.h"
#include "model/batch_layout.h"
#include "model/sliced_multi_token_prediction.h"

namespace tessera::model {

int64_t GptActivations::bytes() const {
  int64_t total = block.bytes() + head_bytes() + mtp.bytes();
  for (const Tensor* t : {&tokens, &positions, &token_types, &mtp_tokens})
    if (t->defined()) total += static_cast<int64_t>(t->nbytes());
  return total;
}

GptModel::GptModel(const ModelConfig& config, ParameterSet& params, const parallel::TensorParallelContext& tp,
                   const ModelChunk& chunk, const TransformerLayerSpec& layer_spec)
    : config_(config), tp_(tp), chunk_(chunk), auxiliary_loss_names_(layer_spec.auxiliary_loss_names) {
  const ModelConfig& c = config_;
  for (const std::string& name : moe_loss_names(c.moe)) auxiliary_loss_names_.push_back(name);
  if (chunk_.num_layers < 0) chunk_.num_layers = c.num_layers - chunk_.first_layer;
  TESSERA_CHECK(chunk_.first_layer >= 0 && chunk_.first_layer + chunk_.num_layers <= c.num_layers,
                "model chunk of layers [", chunk_.first_layer, ", ", chunk_.first_layer + chunk_.num_layers,
                ") is outside the model's ", c.num_layers, " layers");
  const bool tied = !c.untie_embeddings_and_output_weights;
  const bool mtp = c.mtp_num_layers > 0;
  const bool learned_positions = c.position_embedding == PositionEmbedding::LearnedAbsolute;
  // A first chunk that is not the last shares its word embedding with the last stage when the output
  // layer is tied to it or multi-token prediction looks tokens up in it there, and its position embedding
  // when multi-token prediction looks the rolled positions up there (Megatron-Core's last stage builds an
  // embedding when mtp_process; the embedding group sums both copies' gradients).
  if (chunk_.pre_process)
    embedding_.emplace(config_, params, tp, (tied || mtp) && !chunk_.post_process,
                       mtp && learned_positions && !chunk_.post_process);
  block_ = std::make_unique<TransformerBlock>(config_, chunk_.first_layer, chunk_.num_layers, params, tp, layer_spec);
  if (chunk_.post_process) {
    Parameter* words = tied && embedding_ ? &embedding_->word_embeddings() : nullptr;
    // ZB-V's V puts the first and the last model chunk on one rank: the output layer ties to the first
    // chunk's word embedding itself (no copy, and no sum over an embedding group).
    if (tied && !embedding_ && (words = params.find("embedding.word_embeddings.weight")))
      words->spec.shared_with_last_stage = false;
    head_.emplace(config_, params, tp, words);
    if (mtp) {
      // The modules look tokens up in the word embedding the output layer is tied to (on a last stage
      // without the embedding, its tied copy) or, untied, in the chunk's own embedding or a copy of it.
      Parameter* table = tied ? &head_->output_weight() : embedding_ ? &embedding_->word_embeddings() : nullptr;
      if (!table) table = &stage_copy(params, vocab_parallel_spec("embedding.word_embeddings.weight", c, tp));
      Parameter* positions = nullptr;
      if (learned_positions)
        positions = embedding_ ? embedding_->position_embeddings() : &stage_copy(params, position_embedding_spec(c));
      mtp_ = std::make_unique<MultiTokenPrediction>(config_, params, tp, layer_spec, *table, positions, *head_);
      for (const std::string& name : mtp_loss_names(c)) auxiliary_loss_names_.push_back(name);
    }
  }
  if (!chunk_.post_process && c.mtp_num_layers > 0)
    for (const std::string& name : mtp_loss_names(c)) auxiliary_loss_names_.push_back(name);
}

Parameter& GptModel::stage_copy(ParameterSet& params, ParameterSpec spec) {
  // ZB-V's V: the first chunk is on this rank too, and its parameter is the one to use (no copy, no sum).
  if (Parameter* own = params.find(spec.name)) {
    own->spec.shared_with_last_stage = false;
    return *own;
  }
  // Same name, so the same initial values as the first stage's (and the same values loaded from a
  // checkpoint, which holds the one tensor); the embedding group sums the two copies' gradients so they
  // stay equal, and norms and checkpoints leave the copy out (as LMHead's tied copy).
  spec.tied_copy = spec.shared_with_last_stage = true;
  return *params.add(std::move(spec));
}

Parameter* GptModel::tied_word_embedding() const {
  if (config_.untie_embeddings_and_output_weights) return nullptr;
  if (embedding_) return &embedding_->word_embeddings();
  return head_ ? &head_->output_weight() : nullptr;
}

Tensor GptModel::chunk_input(const MicroBatch& batch, const Tensor& input, const ForwardContext& ctx,
                             GptActivations& rec) const {
  const ModelConfig& c = config_;
  check_batch_shape(batch, ctx, "GptModel");
  rec.doc_start = batch.doc_start;
  rec.positions = seq_major_positions(batch, ctx);
  if (embedding_) {
    rec.tokens = to_seq_major(batch.tokens);
    if (batch.ids_checked_below != c.vocab_size) check_ids(rec.tokens, c.vocab_size, "token");
    if (batch.token_types.defined()) rec.token_types = to_seq_major(batch.token_types);
    return embedding_->forward(rec.tokens, rec.positions, rec.token_types, ctx);
  }
  return checked_chunk_input(input, ctx, c.hidden_size, tp_, "GptModel");
}

Tensor GptModel::forward(const MicroBatch& batch, const Tensor& input, const ForwardContext& context, ChunkRecord& record,
                         LossSums& losses, const ParamHooks& hooks) const {
  auto& rec = static_cast<GptActivations&>(record);
  ForwardContext ctx = context;
  ctx.doc_start = batch.doc_start;
  ctx.losses = &losses;
  if (embedding_ && hooks.params_needed_below) hooks.params_needed_below(embedding_->end_offset());
  Tensor x = chunk_input(batch, input, ctx, rec);  // sets rec.positions
  x = block_->forward(x, rec.positions, ctx, rec.block, hooks);
  if (!head_) return x;
  rec.labels = to_seq_major(batch.labels);
  rec.loss_mask = to_seq_major(batch.loss_mask);
  const bool ids_checked = batch.ids_checked_below == config_.vocab_size;  // on the host, before the upload
  if (!ids_checked) check_ids(rec.labels, config_.vocab_size, "label");
  if (hooks.params_needed_below) hooks.params_needed_below(head_->end_offset());
  // A distilling forward keeps the logits for the KD term: the cross-entropy's gradient waits for backward.
  const float fused_grad_scale = ctx.training && !ctx.distillation ? ctx.loss_grad_scale : 0.0f;
  if (losses.keeps_on(x.device())) {  // no copy back per micro-batch
    const Tensor total = losses.lm_total(x.device());
    head_->forward(x, rec, nullptr, fused_grad_scale, &total);
  } else {
    losses.lm += head_->forward(x, rec, nullptr, fused_grad_scale);
  }
  if (mtp_ && ctx.token_slice) {
    // Token slices: the modules wait for the last slice and run over the whole sequence.
    if (!ids_checked && !rec.tokens.defined()) check_ids(to_seq_major(batch.tokens), config_.vocab_size, "token");
    if (hooks.params_needed_below) hooks.params_needed_below(mtp_->end_offset());
    sliced_mtp_forward(*mtp_, rec.final_ln, ctx, tp_, losses);
  } else if (mtp_) {
    if (!rec.tokens.defined()) rec.mtp_tokens = to_seq_major(batch.tokens);
    const Tensor& tokens = rec.tokens.defined() ? rec.tokens : rec.mtp_tokens;
    if (!ids_checked) check_ids(tokens, config_.vocab_size, "token");
    if (hooks.params_needed_below) hooks.params_needed_below(mtp_->end_offset());
    mtp_->forward(rec.final_ln, tokens, rec.labels, rec.loss_mask, rec.positions, ctx, rec.mtp, losses,
                  batch.host_loss_mask);
  }
  if (ctx.distillation) losses.add_auxiliary(kDistillationLossName, head_->distill(rec, *ctx.distillation));
  return Tensor();
}

Tensor GptModel::backward(ChunkRecord& record, const Tensor& doutput, const ForwardContext& context, float grad_scale,
                          const ParamHooks& hooks) const {
  auto& rec = static_cast<GptActivations&>(record);
  ForwardContext ctx = context;
  ctx.doc_start = rec.doc_start;
  ctx.losses = nullptr;
  ctx.grad_scale = grad_scale;
  auto final_from = [&](int64_t offset) {
    if (hooks.grads_final_from) hooks.grads_final_from(offset);
  };
  Tensor dx = doutput;
  if (head_) {
    Tensor dfinal;  // the MTP modules' gradient of the final norm's output
    if (mtp_ && ctx.token_slice) {  // this slice's part of the modules' gradient (run by the last slice)
      dfinal = sliced_mtp_backward(*mtp_, ctx, tp_, grad_scale);
      final_from(mtp_->begin_offset());
    } else if (mtp_) {
      dfinal = mtp_->backward(rec.mtp, rec.positions, ctx, grad_scale);
      rec.mtp_tokens = Tensor();
      final_from(mtp_->begin_offset());
    }
    dx = head_->backward(rec, grad_scale, dfinal);
    final_from(head_->begin_offset());  // and the output layer (or tied copy) in it
  }
  dx = block_->backward(dx, rec.positions, ctx, rec.block, hooks);
  if (!embedding_) return dx;
  embedding_->backward(dx, rec.tokens, rec.positions, rec.token_types, ctx);
  final_from(embedding_->begin_offset());
  return Tensor();
}

Tensor GptModel::score(const MicroBatch& batch, const Tensor& input, const ForwardContext& context) const {
  GptActivations rec;
  ForwardContext ctx = context;
  ctx.doc_start = batch.doc_start;
  ctx.losses = nullptr;
  Tensor x = chunk_input(batch, input, ctx, rec);
  x = block_->forward(x, rec.positions, ctx, rec.block, {});
  if (!head_) return x;
  Tensor labels = to_seq_major(batch.labels);
  check_ids(labels, config_.vocab_size, "label");
  return head_->score(x, labels);
}

Tensor GptModel::logits(const MicroBatch& batch, const ForwardContext& context) const {
  TESSERA_CHECK(chunk_.pre_process && chunk_.post_process, "GptModel::logits needs the whole model; this object "
                "holds a pipeline chunk");
  GptActivations rec;  // the layers' records of one forward, dropped on return
  ForwardContext ctx = context;
  ctx.training = false;
  ctx.doc_start = batch.doc_start;
  ctx.losses = nullptr;
  ctx.distillation = nullptr;
  Tensor x = chunk_input(batch, Tensor(), ctx, rec);
  x = block_->forward(x, rec.positions, ctx, rec.block, {});
  rec.block = BlockRecord();
  return head_->logits(x);
}

double GptModel::forward(const MicroBatch& batch, const ForwardContext& ctx, GptActivations& rec) const {
  TESSERA_CHECK(chunk_.pre_process && chunk_.post_process, "GptModel::forward needs the whole model; this "
                "object holds a pipeline chunk");
  LossSums losses;
  forward(batch, Tensor(), ctx, rec, losses);
  return losses.lm;
}

void GptModel::backward(GptActivations& rec, const ForwardContext& ctx, float grad_scale) const {
  backward(rec, Tensor(), ctx, grad_scale);
}

KvPool GptModel::make_kv_pool(int64_t blocks, int64_t block_size) const {
  TESSERA_CHECK(blocks > 0 && block_size > 0, "a key/value pool of ", blocks, " blocks of ", block_size, " positions");
  return {block_->make_kv_caches(blocks, block_size), blocks, block_size};
}

Tensor GptModel::next_token_logits(const std::vector<int32_t>& tokens, DecodeState& state) const {
  TESSERA_CHECK(chunk_.pre_process && chunk_.post_process, "next_token_logits needs the whole model");
  return decode(tokens, Tensor(), state);
}

Tensor GptModel::decode_step(const std::vector<DecodeStep>& steps, const Tensor& input, KvPool& pool) const {
  const ModelConfig& c = config_;
  TESSERA_CHECK(!steps.empty(), "decode_step: no sequences");
  std::vector<int32_t> tokens, positions;
  std::vector<int64_t> last_rows;
  DecodeLayout layout;
  for (const DecodeStep& s : steps) {
    const int64_t n = static_cast<int64_t>(s.tokens.size()), end = s.past + n;
    TESSERA_CHECK(n > 0, "decode_step: a sequence with no tokens");
    TESSERA_CHECK(c.position_embedding != PositionEmbedding::LearnedAbsolute || end <= c.max_position_embeddings,
                  "sequence of ", end, " tokens is longer than --max-position-embeddings=", c.max_position_embeddings);
    TESSERA_CHECK(end <= static_cast<int64_t>(s.blocks.size()) * pool.block_size, "key/value cache of ",
                  s.blocks.size(), " blocks of ", pool.block_size, " positions cannot hold ", end);
    tokens.insert(tokens.end(), s.tokens.begin(), s.tokens.end());
    for (int64_t p = s.past; p < end; ++p) positions.push_back(static_cast<int32_t>(p));
    last_rows.push_back(static_cast<int64_t>(tokens.size()) - 1);
    layout.sequences.push_back({n, s.past, s.blocks});
  }
  const int64_t rows = static_cast<int64_t>(tokens.size());
  layout.positions = kernels::from_host(positions);
  Tensor x = input;
  if (embedding_) {
    const Tensor token_ids = kernels::from_host(tokens);
    check_ids(token_ids, c.vocab_size, "token");
    x = embedding_->decode(token_ids, layout.positions);
  } else {
    TESSERA_CHECK(input.defined() && input.shape() == Shape({rows, c.hidden_size}), "decode_step: the input is ",
                  input.defined() ? shape_str(input.shape()) : "missing", ", expected [", rows, ", ", c.hidden_size,
                  "]");
  }
  x = block_->decode(x, layout, pool.layers);
  return head_ ? head_->decode(x, last_rows) : x;
}

}  // namespace tessera::model
