// Megatron's embedding on one rank: word embeddings split by vocabulary rows over the tensor group,
// learned absolute positions and, for models that have them, token types (both replicated). Each rank
// looks up the ids of its vocabulary shard (zeros elsewhere), tensor rank 0 adds the positions and token
// types, and the sum over the tensor group is the embedding (reduce-scattered to sequence shards under
// sequence parallelism), followed by dropout.
#pragma once

#include <vector>

#include "model/language_model.h"

namespace tessera::model {

// A [padded vocab, hidden] weight split by vocabulary rows over the tensor group.
ParameterSpec vocab_parallel_spec(const std::string& name, const ModelConfig& c,
                                  const parallel::TensorParallelContext& tp);
// The learned absolute position embedding [max positions, hidden] (replicated over the tensor group).
ParameterSpec position_embedding_spec(const ModelConfig& c);

class VocabParallelEmbedding {
 public:
  // shared_with_last_stage: the word embedding has a copy on another pipeline stage (the output layer
  // tied to it, or multi-token prediction's lookups); positions_shared_with_last_stage: so has the learned
  // absolute position embedding (multi-token prediction's lookups).
  VocabParallelEmbedding(const ModelConfig& config, ParameterSet& params, const parallel::TensorParallelContext& tp,
                         bool shared_with_last_stage, bool positions_shared_with_last_stage = false);

  // tokens, positions, token_types (optional): [T] in the [seq, batch] layout.
  Tensor forward(const Tensor& tokens, const Tensor& positions, const Tensor& token_types,
                 const ForwardContext& ctx) const;
  void backward(const Tensor& dy, const Tensor& tokens, const Tensor& positions, const Tensor& token_types,
                const ForwardContext& ctx) const;
  // Inference: the embeddings [n, hidden] of n tokens of one sequence, tokens and positions int32 [n]
  // (no dropout, no sequence split).
  Tensor decode(const Tensor& tokens, const Tensor& positions) const;

  Parameter& word_embeddings() const { return *words_; }
  Parameter* position_embeddings() const { return positions_; }  // null without learned absolute positions
  int64_t begin_offset() const { return begin_; }
  int64_t end_offset() const { return end_; }

 private:
  // The rank's partial sum of the three lookups (token_types may be undefined).
  Tensor lookup(const Tensor& tokens, const Tensor& positions, const Tensor& token_types) const;

  const ModelConfig& config_;
  const parallel::TensorParallelContext& tp_;
  int64_t vocab_begin_, vocab_end_;
  Parameter* words_;
  Parameter* positions_ = nullptr;    // learned absolute positions only
  Parameter* token_types_ = nullptr;  // num_tokentypes > 0 only
  int64_t begin_, end_;
};

}  // namespace tessera::model
