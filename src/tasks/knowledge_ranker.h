// MEGATRON-CNTRL's contextual knowledge ranker at inference: a BERT multiple-choice checkpoint fine-tuned
// with `tessera finetune --task CNTRL-RANKER` scoring each knowledge sentence against the story so far,
// one sequence [CLS] knowledge [SEP] context [SEP] each (tasks/cntrl_dataset.h), in one process.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "model/language_model.h"
#include "model/parameters.h"

namespace tessera::tasks {

class KnowledgeRanker {
 public:
  // Errors name --ranker-load: no checkpoint, not a multiple-choice BERT, a parameter it lacks.
  explicit KnowledgeRanker(const std::string& load);

  // The head's logit of each sentence (higher: more relevant), in the order given.
  std::vector<float> scores(const std::string& context, const std::vector<std::string>& knowledge) const;

 private:
  model::ModelConfig config_;
  std::unique_ptr<data::Tokenizer> tokenizer_;
  model::ParameterSet params_;
  std::unique_ptr<model::LanguageModelChunk> model_;
};

}  // namespace tessera::tasks
