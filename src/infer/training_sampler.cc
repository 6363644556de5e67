#include "infer/training_sampler.h"

#include <cstring>

#include "infer/generator.h"
#include "model/model_factory.h"

namespace tessera::infer {

TrainingSampler::TrainingSampler(const model::LanguageModelChunk& model, const model::ParameterSet& params,
                                 const parallel::TensorParallelContext& tp, const data::TokenizerOptions& tokenizer,
                                 std::string prompt, int64_t tokens)
    : params_(params), tokenizer_(data::build_tokenizer(tokenizer)), tp_{tp.group, false, tp.experts} {
  const model::ModelConfig& c = model.config();
  prompt_ = tokenizer_->encode(prompt);
  TESSERA_CHECK(!prompt_.empty(), "--sample-prompt='", prompt, "': has no tokens");
  tokens_ = tokens;
  if (c.position_embedding == model::PositionEmbedding::LearnedAbsolute)
    tokens_ = std::min(tokens_, c.max_position_embeddings - static_cast<int64_t>(prompt_.size()));
  TESSERA_CHECK(tokens_ > 0, "--sample-prompt='", prompt, "': its ", prompt_.size(),
                " tokens leave no room in the model's ", c.max_position_embeddings, " positions");
  if (tp.sequence_parallel) {
    copy_params_ = std::make_unique<model::ParameterSet>();
    copy_ = model::build_model_chunk(c, *copy_params_, tp_);
    copy_params_->allocate(0);
    TESSERA_CHECK(copy_params_->numel() == params.numel(), "sampler: the decoding copy of the model has ",
                  copy_params_->numel(), " parameters, the trained one ", params.numel());
  }
  runner_ = make_model_runner(copy_ ? *copy_ : model, tp_);
}

TrainingSampler::~TrainingSampler() = default;

std::string TrainingSampler::sample() {
  if (copy_params_)
    std::memcpy(copy_params_->values().host_raw(), params_.values().host_raw(), params_.values().nbytes());
  GenerationOptions greedy;
  greedy.sampling.temperature = 0;
  greedy.sampling.tokens_to_generate = tokens_;
  greedy.sampling.eod = tokenizer_->eod();
  Generation g = generate(*runner_, {prompt_}, greedy)[0];
  const auto prompt_length = static_cast<size_t>(g.prompt_length);
  std::span<const int32_t> tokens(g.tokens);
  if (tokens.size() > prompt_length && tokens.back() == tokenizer_->eod()) tokens = tokens.first(tokens.size() - 1);
  return continuation_text(*tokenizer_, tokens.first(prompt_length), tokens.subspan(prompt_length));
}

}  // namespace tessera::infer
