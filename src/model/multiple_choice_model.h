// BERT for multiple choice (Megatron's megatron/model/multiple_choice.py, the model of tasks/race):
// the BERT encoder (word, position and two token-type embeddings, bert_layer_spec() layers attending
// over the non-padding keys, the final norm), the pooler (tanh of a dense layer on the [CLS] position)
// and the multiple-choice head: dropout (hidden_dropout), then Linear(hidden, 1) ("multichoice_head"),
// one logit per (question, choice), and the cross-entropy over each question's choices.
//
// A micro-batch of q questions with c choices is c * q rows: rows c*i .. c*i + c - 1 are question i's
// choices in order (Megatron's [b, c, s] viewed as [b * c, s]); MicroBatch::choice_label holds the q
// correct choices. The loss (LossSums::lm) is the sum over questions of the cross-entropy of the c logits,
// so the caller divides by the questions of its global batch. score() gives per question (label logit,
// log-sum-exp, arg-max choice) as [3 * q]: the arg-max against the label is the accuracy.
//
// Parameter names are BertModel's for the encoder and pooler ("embedding.*", "decoder.layers.*",
// "encoder.final_layernorm.*", "pooler.dense.*"), so a pretrained BERT checkpoint loads by name; the
// masked-LM and sentence-order heads are not part of it, and "multichoice_head.*" is new.
// The family "bert_multiple_choice" (register_multiple_choice_family) builds it.
#pragma once

#include <memory>
#include <optional>

#include "model/lm_head.h"
#include "model/transformer_block.h"
#include "model/vocab_parallel_embedding.h"

namespace tessera::model {

inline constexpr const char* kMultipleChoiceFamily = "bert_multiple_choice";

struct MultipleChoiceActivations final : ChunkRecord {
  Tensor tokens, positions, token_types;  // [seq, rows] layout
  Tensor padding_mask;                    // [rows, seq] as given
  BlockRecord block;
  Tensor final_input, final_ln, final_mean, final_rstd;
  Tensor cls, pooled, dropped;  // [rows, hidden]
  Tensor logits, lse;           // [questions, choices], [questions]
  Tensor labels, label_mask;    // int32 [questions], fp32 [questions] (ones)
  int64_t bytes() const override;
};

class MultipleChoiceModel final : public LanguageModelChunk {
 public:
  MultipleChoiceModel(const ModelConfig& config, ParameterSet& params,
                      const parallel::TensorParallelContext& tp = parallel::TensorParallelContext::single_process(),
                      const ModelChunk& chunk = {});

  const ModelConfig& config() const override { return config_; }
  const ModelChunk& chunk() const override { return chunk_; }
  void set_recompute(const Recompute& r) override { block_->set_recompute(r); }
  bool causal_language_model() const override { return false; }

  std::unique_ptr<ChunkRecord> make_record() const override { return std::make_unique<MultipleChoiceActivations>(); }
  // ctx.batch is the number of rows (choices x questions).
  Tensor forward(const MicroBatch& batch, const Tensor& input, const ForwardContext& ctx, ChunkRecord& rec,
                 LossSums& losses, const ParamHooks& hooks = {}) const override;
  Tensor backward(ChunkRecord& rec, const Tensor& doutput, const ForwardContext& ctx, float grad_scale,
                  const ParamHooks& hooks = {}) const override;
  KvPool make_kv_pool(int64_t blocks, int64_t block_size) const override;  // an Error: not a generative model
  Tensor decode_step(const std::vector<DecodeStep>& steps, const Tensor& input, KvPool& pool) const override;
  // Without dropout; on the last chunk [3 * questions]: (label logit, log-sum-exp, arg-max choice).
  Tensor score(const MicroBatch& batch, const Tensor& input, const ForwardContext& ctx) const override;

 private:
  // Embedding (first chunk) or the previous chunk's activation, then the layers; on the last chunk the
  // choice logits [questions, choices] in rec.logits. Returns the block's output.
  Tensor run(const MicroBatch& batch, const Tensor& input, const ForwardContext& ctx, MultipleChoiceActivations& rec,
             const ParamHooks& hooks) const;
  void linear_forward(const Parameter& w, const Parameter& b, const Tensor& x, const Tensor& y) const;
  void linear_backward(const Parameter& w, const Parameter& b, const Tensor& dy, const Tensor& x,
                       const Tensor& dx) const;
  kernels::DropoutRegion pooled_region(const ForwardContext& ctx) const;

  ModelConfig config_;
  const parallel::TensorParallelContext& tp_;
  ParameterSet* params_;
  ModelChunk chunk_;
  std::optional<VocabParallelEmbedding> embedding_;  // first chunk
  std::unique_ptr<TransformerBlock> block_;
  // Last chunk: the final norm, the pooler and the head (replicated over the tensor group).
  std::unique_ptr<Norm> final_norm_;
  Parameter *pooler_weight_ = nullptr, *pooler_bias_ = nullptr, *head_weight_ = nullptr, *head_bias_ = nullptr;
  int64_t head_begin_ = 0, head_end_ = 0;
};

// Adds "bert_multiple_choice" to the model factory (idempotent).
void register_multiple_choice_family();

}  // namespace tessera::model
