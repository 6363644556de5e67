#include "tasks/knowledge_ranker.h"

#include <numeric>

#include "ckpt/checkpoint.h"
#include "core/check.h"
#include "data/tokenizer_factory.h"
#include "model/model_factory.h"
#include "model/multiple_choice_model.h"
#include "tasks/cntrl_dataset.h"
#include "tasks/finetune.h"
#include "tasks/finetune_race.h"
#include "train/step_context.h"

namespace tessera::tasks {

KnowledgeRanker::KnowledgeRanker(const std::string& load) {
  TESSERA_CHECK(ckpt::latest_checkpointed_iteration(load) >= 0, "--ranker-load=", load,
                ": no checkpoint there (latest_checkpointed_iteration.txt is missing)");
  const nlohmann::json run = ckpt::latest_checkpoint_args(load);
  TESSERA_CHECK(run.contains("model"), "--ranker-load=", load, ": the checkpoint does not record its model");
  config_ = model::config_from_json(run.at("model"));
  TESSERA_CHECK(config_.family == model::kMultipleChoiceFamily, "--ranker-load=", load, ": holds a '",
                config_.family, "' model, not a ranker (finetune --task CNTRL-RANKER saves one)");
  config_.hidden_dropout = config_.attention_dropout = 0;
  tokenizer_ = data::build_tokenizer(tasks::finetune_tokenizer_options({}, run, ckpt::latest_tokenizer_files(load)));
  model::register_multiple_choice_family();
  model_ = model::build_model_chunk(config_, params_);
  params_.allocate(0);
  const tasks::PretrainedLoad loaded = tasks::load_pretrained_weights(load, params_);
  TESSERA_CHECK(loaded.initialised.empty(), "--ranker-load=", load, ": the checkpoint has no ", loaded.initialised[0]);
}

std::vector<float> KnowledgeRanker::scores(const std::string& context, const std::vector<std::string>& knowledge) const {
  if (knowledge.empty()) return {};
  // Each sentence is a question of one choice: its label logit is the sentence's score.
  std::vector<tasks::MultipleChoiceSample> questions;
  for (const std::string& k : knowledge)
    questions.push_back({{tasks::cntrl_ranker_sequence(k, context, *tokenizer_, config_.seq_length)}, 0, 0});
  std::vector<int64_t> all(questions.size());
  std::iota(all.begin(), all.end(), 0);
  const model::MicroBatch mb = tasks::multiple_choice_micro_batch(questions, all);
  const model::ForwardContext ctx =
      train::micro_batch_context(/*seed=*/0, /*completed=*/0, /*training=*/false, 0, config_.seq_length, mb.tokens.dim(0));
  const Tensor out = model_->score(mb, Tensor(), ctx);
  std::vector<float> scores(knowledge.size());
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = out.host_f32()[3 * i];
  return scores;
}

}  // namespace tessera::tasks
