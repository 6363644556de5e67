// BERT (Megatron's BertModel, pretrain_bert.py): word, position and (with the binary head) token-type
// embeddings, a block of bidirectional transformer layers that attend over the non-padding keys
// (pre-LN, or the original post-LN ordering with --apply-residual-connection-post-layernorm), and the
// masked-LM and sentence-order heads (model/bert_heads.h). The objective is lm loss + sop loss: the
// masked-LM cross-entropy per masked token and the sentence-order cross-entropy per sample. One object
// holds one pipeline chunk; the parts are shared with GPT.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "model/bert_heads.h"
#include "model/transformer_block.h"
#include "model/vocab_parallel_embedding.h"

namespace tessera::model {

struct BertActivations final : ChunkRecord, BertHeadRecord {
  Tensor tokens, positions, token_types;  // [seq, batch] layout
  Tensor padding_mask;                    // [batch, seq] as given (the caller's, not counted)
  BlockRecord block;
  int64_t bytes() const override;
};

class BertModel final : public LanguageModelChunk {
 public:
  BertModel(const ModelConfig& config, ParameterSet& params,
            const parallel::TensorParallelContext& tp = parallel::TensorParallelContext::single_process(),
            const ModelChunk& chunk = {});

  const ModelConfig& config() const override { return config_; }
  const ModelChunk& chunk() const override { return chunk_; }
  void set_recompute(const Recompute& r) override { block_->set_recompute(r); }
  std::vector<std::string> auxiliary_loss_names() const override;
  bool causal_language_model() const override { return false; }
  Parameter* tied_word_embedding() const override;

  std::unique_ptr<ChunkRecord> make_record() const override { return std::make_unique<BertActivations>(); }
  Tensor forward(const MicroBatch& batch, const Tensor& input, const ForwardContext& ctx, ChunkRecord& rec,
                 LossSums& losses, const ParamHooks& hooks = {}) const override;
  Tensor backward(ChunkRecord& rec, const Tensor& doutput, const ForwardContext& ctx, float grad_scale,
                  const ParamHooks& hooks = {}) const override;
  // BERT is not a causal language model: no incremental decoding, no next-token scores (Errors).
  KvPool make_kv_pool(int64_t blocks, int64_t block_size) const override;
  Tensor decode_step(const std::vector<DecodeStep>& steps, const Tensor& input, KvPool& pool) const override;
  Tensor score(const MicroBatch& batch, const Tensor& input, const ForwardContext& ctx) const override;

 private:
  Tensor chunk_input(const MicroBatch& batch, const Tensor& input, const ForwardContext& ctx,
                     BertActivations& rec) const;

  ModelConfig config_;
  const parallel::TensorParallelContext& tp_;
  ModelChunk chunk_;
  std::optional<VocabParallelEmbedding> embedding_;  // first chunk
  std::unique_ptr<TransformerBlock> block_;
  std::optional<BertHeads> heads_;  // last chunk
};

}  // namespace tessera::model
