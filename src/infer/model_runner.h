// What generation, the server and zero-shot evaluation need from a model, behind one small interface
// so that the layout (one process, tensor parallel today; pipeline stages later) is the runner's
// business: incremental decoding that yields the full next-token logits, and scoring a micro-batch
// (log-probability and arg-max of every label position).
//
// Every rank of a model-parallel group calls the same methods with the same arguments in the same
// order (the calls contain the group's collectives); the results are the same on every rank.
#pragma once

#include <memory>
#include <vector>

#include "model/language_model.h"

namespace tessera::infer {

// The caches of one sequence being decoded (opaque to callers).
struct DecodeSequence {
  model::DecodeState state;
};

// Per-position results of scoring a micro-batch, sample-major [batch, seq] like MicroBatch.
struct Scores {
  std::vector<double> label_logprob;  // log p(label | prefix)
  std::vector<int32_t> argmax;        // the most likely next id over the (padded) vocabulary, as
                                      // Megatron's evaluation takes it from the gathered logits
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual const model::ModelConfig& config() const = 0;

  // A key/value pool of `blocks` blocks of `block_size` positions for sequences decoded together.
  virtual model::KvPool make_kv_pool(int64_t blocks, int64_t block_size) const = 0;
  // One step of several sequences (model::DecodeStep): the logits over the padded vocabulary after each
  // one's last token, [steps, padded vocab].
  virtual Tensor decode_step(const std::vector<model::DecodeStep>& steps, model::KvPool& pool) const = 0;

  // One sequence alone: an empty one that can hold up to `capacity` tokens, then its next tokens (the
  // logits after the last of them, [padded vocab]).
  DecodeSequence start(int64_t capacity) const { return {{make_kv_pool(1, capacity), 0}}; }
  Tensor next_token_logits(const std::vector<int32_t>& tokens, DecodeSequence& seq) const;
  // Makes every rank of the model group hold the deciding rank's values (sampled tokens: ranks must
  // not drift apart on a last-bit difference of their logits).
  virtual void agree(std::vector<int32_t>& values) const = 0;
  // Forward over a micro-batch without dropout.
  virtual Scores score(const model::MicroBatch& batch) const = 0;
};

// The runner of a model chunk in one process or split over a tensor-parallel group (the model holds
// the group; its decoding step already gathers the vocabulary shards). With a pipeline group of
// several stages, `model` is this stage's chunk: hidden states go stage to stage and the last stage's
// logits and scores are broadcast to every stage.
std::unique_ptr<ModelRunner> make_model_runner(const model::LanguageModelChunk& model,
                                               const parallel::TensorParallelContext& tp,
                                               comm::ProcessGroup* pipeline = nullptr);

}  // namespace tessera::infer
