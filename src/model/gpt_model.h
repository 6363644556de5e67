// GPT (Megatron-Core's GPTModel): a vocab-parallel embedding, a block of pre-LN transformer layers built
// from a layer spec, and the LM head (final norm, output layer tied to the word embedding unless
// --untie-embeddings-and-output-weights, vocab-parallel cross-entropy), trained with next-token
// cross-entropy. One object holds one pipeline chunk; each part is there only where the chunk has it.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "model/lm_head.h"
#include "model/multi_token_prediction.h"
#include "model/transformer_block.h"
#include "model/vocab_parallel_embedding.h"

namespace tessera::model {

// Everything a GPT chunk's backward needs from its forward for one micro-batch.
struct GptActivations final : ChunkRecord, LMHeadRecord {
  Tensor tokens, positions, token_types;  // [seq, batch] layout (row t = s * batch + b)
  Tensor doc_start;                       // [batch, seq] as given, or undefined
  BlockRecord block;
  Tensor mtp_tokens;  // the tokens in the [seq, batch] layout on a last chunk without the embedding
  MtpRecord mtp;      // --mtp-num-layers' modules, on the last chunk
  // The layers' records, the micro-batch's ids and on the last chunk the head's tensors (the final norm's,
  // the logits shard and the log-sum-exp). doc_start is the caller's tensor, shared, so not counted.
  int64_t bytes() const override;
};

class GptModel final : public LanguageModelChunk {
 public:
  // Declares the chunk's parameters in `params` (allocate them before the first forward). With a tensor
  // group of several ranks this rank holds its shard of every split layer and of the vocabulary.
  GptModel(const ModelConfig& config, ParameterSet& params,
           const parallel::TensorParallelContext& tp = parallel::TensorParallelContext::single_process(),
           const ModelChunk& chunk = {}, const TransformerLayerSpec& layer_spec = gpt_layer_spec());

  const ModelConfig& config() const override { return config_; }
  const ModelChunk& chunk() const override { return chunk_; }
  void set_recompute(const Recompute& r) override { block_->set_recompute(r); }
  std::vector<std::string> auxiliary_loss_names() const override { return auxiliary_loss_names_; }
  Parameter* tied_word_embedding() const override;

  std::unique_ptr<ChunkRecord> make_record() const override { return std::make_unique<GptActivations>(); }
  Tensor forward(const MicroBatch& batch, const Tensor& input, const ForwardContext& ctx, ChunkRecord& rec,
                 LossSums& losses, const ParamHooks& hooks = {}) const override;
  Tensor backward(ChunkRecord& rec, const Tensor& doutput, const ForwardContext& ctx, float grad_scale,
                  const ParamHooks& hooks = {}) const override;
  KvPool make_kv_pool(int64_t blocks, int64_t block_size) const override;
  Tensor decode_step(const std::vector<DecodeStep>& steps, const Tensor& input, KvPool& pool) const override;
  Tensor score(const MicroBatch& batch, const Tensor& input, const ForwardContext& ctx) const override;
  Tensor logits(const MicroBatch& batch, const ForwardContext& ctx) const override;

  // The whole model (a chunk that is both first and last): the masked loss sum, and its backward.
  double forward(const MicroBatch& batch, const ForwardContext& ctx, GptActivations& rec) const;
  void backward(GptActivations& rec, const ForwardContext& ctx, float grad_scale) const;
  Tensor next_token_logits(const std::vector<int32_t>& tokens, DecodeState& state) const;

 private:
  // The chunk's input: the embedding of batch.tokens on the first chunk, else `input`, checked.
  Tensor chunk_input(const MicroBatch& batch, const Tensor& input, const ForwardContext& ctx,
                     GptActivations& rec) const;
  // The last stage's copy of a first-stage embedding parameter that multi-token prediction looks up
  // (Megatron-Core's embedding on an mtp_process stage), or the first chunk's own where this rank holds it.
  static Parameter& stage_copy(ParameterSet& params, ParameterSpec spec);

  ModelConfig config_;
  const parallel::TensorParallelContext& tp_;
  ModelChunk chunk_;
  std::optional<VocabParallelEmbedding> embedding_;  // first chunk
  std::unique_ptr<TransformerBlock> block_;
  std::optional<LMHead> head_;  // last chunk
  std::unique_ptr<MultiTokenPrediction> mtp_;  // last chunk, with --mtp-num-layers
  std::vector<std::string> auxiliary_loss_names_;  // the layer spec's, then the MoE layers' (moe_loss_names)
};

}  // namespace tessera::model
