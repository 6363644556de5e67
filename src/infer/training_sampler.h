// --sample-interval N --sample-prompt TEXT: a short greedy continuation of a prompt printed in the
// training log, from the weights being trained. Decoding needs a model without sequence
// parallelism, so under --sequence-parallel the sampler keeps its own copy of the model (same shards,
// values copied at each sample), built with the trained model's expert groups so that its experts split
// as the trained ones do.
#pragma once

#include <memory>
#include <string>

#include "data/tokenizer_factory.h"
#include "infer/model_runner.h"

namespace tessera::infer {

class TrainingSampler {
 public:
  // Collective-free. Checks that the prompt fits the model (errors name --sample-prompt).
  // `tp`: the context the model was built with (its tensor group, sequence parallelism, expert groups).
  TrainingSampler(const model::LanguageModelChunk& model, const model::ParameterSet& params,
                  const parallel::TensorParallelContext& tp, const data::TokenizerOptions& tokenizer,
                  std::string prompt, int64_t tokens_to_generate = 32);
  ~TrainingSampler();
  // The greedy continuation (text after the prompt). Collective over the tensor group.
  std::string sample();

 private:
  const model::ParameterSet& params_;
  std::unique_ptr<data::Tokenizer> tokenizer_;
  parallel::TensorParallelContext tp_;
  std::unique_ptr<model::ParameterSet> copy_params_;  // under sequence parallelism only
  std::unique_ptr<model::LanguageModelChunk> copy_;
  std::unique_ptr<ModelRunner> runner_;
  std::vector<int32_t> prompt_;
  int64_t tokens_ = 0;
};

}  // namespace tessera::infer
