#include "tasks/finetune_race.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>

#include "ckpt/checkpoint.h"
#include "core/check.h"
#include "data/tokenizer_factory.h"
#include "model/model_factory.h"
#include "model/multiple_choice_model.h"
#include "tasks/cntrl_dataset.h"
#include "train/args/argument_rules.h"
#include "train/step_context.h"

namespace tessera::tasks {
namespace {

using train::rules::require;

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

double percent(int64_t correct, int64_t total) {
  return total > 0 ? 100.0 * static_cast<double>(correct) / static_cast<double>(total) : 0.0;
}

// Megatron's lines of calculate_correct_answers and metrics_func.
std::string subset_line(int64_t epoch, const std::string& name, int64_t correct, int64_t total, double seconds) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                " > |epoch: %lld| metrics for %s: correct / total = %lld / %lld = %.4f %%, elapsed time (sec): %.3f",
                static_cast<long long>(epoch), name.c_str(), static_cast<long long>(correct),
                static_cast<long long>(total), percent(correct, total), seconds);
  return buf;
}

std::string overall_line(int64_t epoch, int64_t correct, int64_t total) {
  char buf[256];
  std::snprintf(buf, sizeof buf, " >> |epoch: %lld| overall: correct / total = %lld / %lld = %.4f %%",
                static_cast<long long>(epoch), static_cast<long long>(correct), static_cast<long long>(total),
                percent(correct, total));
  return buf;
}

// Megatron's RaceDataset: the directories' samples, with its lines.
std::vector<tasks::MultipleChoiceSample> build_race_dataset(const std::string& name,
                                                           const std::vector<std::string>& dirs,
                                                           const data::Tokenizer& tokenizer, int64_t seq_length,
                                                           const std::function<void(const std::string&)>& say) {
  say(str_cat(" > building RACE dataset for ", name, ":"));
  std::string paths = "  > paths:";
  for (const std::string& d : dirs) paths += " " + d;
  say(paths);
  std::vector<tasks::MultipleChoiceSample> all;
  for (const std::string& dir : dirs) {
    say(str_cat("   > working on ", dir));
    tasks::RaceReadStats s;
    std::vector<tasks::MultipleChoiceSample> part = tasks::read_race_directory(dir, tokenizer, seq_length, &s);
    char buf[256];
    std::snprintf(buf, sizeof buf, "    > processed %lld document, %lld questions, and %lld samples in %.2f seconds",
                  static_cast<long long>(s.documents), static_cast<long long>(s.questions),
                  static_cast<long long>(s.samples), s.seconds);
    say(buf);
    for (auto& sample : part) all.push_back(std::move(sample));
  }
  say(str_cat("  >> total number of samples: ", all.size()));
  return all;
}

// The questions of CNTRL-RANKER files (tasks/cntrl_dataset.h), with lines like RACE's.
std::vector<tasks::MultipleChoiceSample> build_ranker_dataset(const std::string& name,
                                                             const std::vector<std::string>& paths,
                                                             const data::Tokenizer& tokenizer, int64_t seq_length,
                                                             int64_t choices, uint64_t seed,
                                                             const std::function<void(const std::string&)>& say) {
  say(str_cat(" > building CNTRL-RANKER dataset for ", name, ":"));
  std::vector<tasks::MultipleChoiceSample> all;
  for (const std::string& path : paths) {
    std::vector<tasks::MultipleChoiceSample> part =
        tasks::read_cntrl_ranker_questions(path, tokenizer, seq_length, choices, seed);
    say(str_cat("   > ", path, ": ", part.size(), " questions of ", choices, " knowledge sentences"));
    for (auto& sample : part) all.push_back(std::move(sample));
  }
  say(str_cat("  >> total number of samples: ", all.size()));
  return all;
}

struct ValidSet {
  std::string name;
  std::vector<tasks::MultipleChoiceSample> samples;
};

}  // namespace

model::MicroBatch multiple_choice_micro_batch(const std::vector<tasks::MultipleChoiceSample>& samples,
                                              std::span<const int64_t> indices) {
  TESSERA_CHECK(!indices.empty(), "an empty multiple-choice micro-batch");
  const auto& first = samples.at(static_cast<size_t>(indices[0]));
  const auto choices = static_cast<int64_t>(first.choices.size());
  TESSERA_CHECK(choices > 0, "a multiple-choice sample without choices");
  const auto seq = static_cast<int64_t>(first.choices[0].ids.size());
  const auto questions = static_cast<int64_t>(indices.size()), rows = questions * choices;
  model::MicroBatch mb;
  mb.tokens = Tensor::empty({rows, seq}, DType::I32);
  mb.token_types = Tensor::empty({rows, seq}, DType::I32);
  mb.padding_mask = Tensor::empty({rows, seq}, DType::I32);
  mb.choice_label = Tensor::empty({questions}, DType::I32);
  for (int64_t q = 0; q < questions; ++q) {
    const tasks::MultipleChoiceSample& s = samples.at(static_cast<size_t>(indices[q]));
    TESSERA_CHECK(static_cast<int64_t>(s.choices.size()) == choices, "sample ", s.uid, " has ", s.choices.size(),
                  " choices, the micro-batch's first ", choices);
    mb.choice_label.host_i32()[q] = s.label;
    for (int64_t c = 0; c < choices; ++c) {
      const tasks::TokensTypesPaddings& t = s.choices[static_cast<size_t>(c)];
      TESSERA_CHECK(static_cast<int64_t>(t.ids.size()) == seq, "sample ", s.uid, " has a sequence of ", t.ids.size(),
                    " ids, expected ", seq);
      const int64_t row = (q * choices + c) * seq;
      for (int64_t j = 0; j < seq; ++j) {
        const bool token = t.paddings[static_cast<size_t>(j)] != 0;
        mb.tokens.host_i32()[row + j] = t.ids[static_cast<size_t>(j)];
        mb.token_types.host_i32()[row + j] = token ? t.types[static_cast<size_t>(j)] : 0;
        mb.padding_mask.host_i32()[row + j] = token ? 1 : 0;
      }
    }
  }
  return mb;
}

FinetuneResult finetune_multiple_choice(const FinetuneArguments& a, const std::function<void(const std::string&)>& say) {
  validate(a);
  model::register_multiple_choice_family();
  const nlohmann::json recorded = ckpt::latest_checkpoint_args(a.pretrained_checkpoint);
  TESSERA_CHECK(recorded.contains("model"), "--pretrained-checkpoint=", a.pretrained_checkpoint,
                ": the checkpoint does not record its model configuration");
  model::ModelConfig config = model::config_from_json(recorded.at("model"));
  TESSERA_CHECK(config.family == "bert" || config.family == model::kMultipleChoiceFamily, "--pretrained-checkpoint=",
                a.pretrained_checkpoint, ": holds a '", config.family, "' model, not a BERT");
  config.family = model::kMultipleChoiceFamily;
  config.num_tokentypes = 2;
  config.bert_binary_head = false;
  config.hidden_dropout = a.hidden_dropout;
  config.attention_dropout = a.attention_dropout;
  if (a.seq_length > 0) config.seq_length = a.seq_length;
  require(config.seq_length <= config.max_position_embeddings, "--seq-length", config.seq_length,
          str_cat("must be at most the pretrained model's --max-position-embeddings=", config.max_position_embeddings));

  const data::TokenizerOptions tokenizer_options =
      finetune_tokenizer_options(a, recorded, ckpt::latest_tokenizer_files(a.pretrained_checkpoint));
  const std::unique_ptr<data::Tokenizer> tokenizer = data::build_tokenizer(tokenizer_options);
  TESSERA_CHECK(tokenizer->vocab_size() == config.vocab_size, "--tokenizer-type ", tokenizer_options.type,
                " has ", tokenizer->vocab_size(), " ids but the pretrained model was trained with ", config.vocab_size);

  // Data (Megatron: the training and validation sets, then each --valid-data directory on its own).
  const bool race = a.task == "RACE";
  auto build = [&](const std::string& name, const std::vector<std::string>& paths, uint64_t seed) {
    return race ? build_race_dataset(name, paths, *tokenizer, config.seq_length, say)
                : build_ranker_dataset(name, paths, *tokenizer, config.seq_length, a.ranker_choices, seed, say);
  };
  std::vector<tasks::MultipleChoiceSample> train;
  if (a.epochs > 0) train = build("training", a.train_data, a.seed);
  std::vector<ValidSet> valid;
  for (const std::string& path : a.valid_data) {
    ValidSet v{race ? tasks::race_dataset_name(path) : std::filesystem::path(path).stem().string(), {}};
    v.samples = build(v.name, {path}, a.seed + 1);
    valid.push_back(std::move(v));
  }
  const int64_t mbs = a.micro_batch_size, n = static_cast<int64_t>(train.size());
  const int64_t iters_per_epoch = finetune_iters_per_epoch(a, n, "questions");

  // Model and optimizer.
  say(str_cat("building multichoice model for ", a.task, " ..."));
  model::ParameterSet params;
  const std::unique_ptr<model::LanguageModelChunk> net = model::build_model_chunk(config, params);
  params.allocate(a.seed);
  say(str_cat(" > number of parameters: ", params.numel()));
  load_pretrained_and_report(a, params, "multiple-choice model", say);
  optim::AdamWOptimizer optimizer(params, a.adam);

  FinetuneResult result;
  auto evaluate = [&](int64_t epoch, int64_t iteration) {
    say("calculating metrics ...");
    EpochMetrics m{epoch, {}};
    int64_t correct = 0, total = 0;
    for (const ValidSet& v : valid) {
      const auto start = std::chrono::steady_clock::now();
      SubsetAccuracy s{v.name, 0, 0};
      std::vector<int64_t> indices;
      for (int64_t first = 0; first < static_cast<int64_t>(v.samples.size()); first += mbs) {
        indices.resize(static_cast<size_t>(std::min<int64_t>(mbs, static_cast<int64_t>(v.samples.size()) - first)));
        std::iota(indices.begin(), indices.end(), first);
        const model::MicroBatch mb = multiple_choice_micro_batch(v.samples, indices);
        const model::ForwardContext ctx =
            train::micro_batch_context(a.seed, iteration, /*training=*/false, 0, config.seq_length, mb.tokens.dim(0));
        const Tensor scores = net->score(mb, Tensor(), ctx);
        for (size_t q = 0; q < indices.size(); ++q)
          s.correct += static_cast<int32_t>(scores.host_f32()[3 * q + 2]) == mb.choice_label.host_i32()[q] ? 1 : 0;
        s.total += static_cast<int64_t>(indices.size());
      }
      say(subset_line(epoch, v.name, s.correct, s.total, seconds_since(start)));
      correct += s.correct;
      total += s.total;
      m.subsets.push_back(s);
    }
    say(overall_line(epoch, correct, total));
    m.subsets.push_back({"overall", correct, total});
    result.metrics.push_back(m);
  };

  auto step_for = [&](std::span<const int64_t> questions, int64_t) {
    FinetuneStep s;
    s.mb = multiple_choice_micro_batch(train, questions);
    s.seq = config.seq_length;
    s.rows = s.logged_rows = s.mb.tokens.dim(0);
    // The objective is the mean over the micro-batch's questions (torch's CrossEntropyLoss).
    s.normalizer = static_cast<double>(questions.size());
    return s;
  };
  auto save = [&](int64_t iteration) {
    nlohmann::json args = {{"model", model::to_json(config)},
                           {"tokenizer_type", tokenizer_options.type},
                           {"vocab_file", tokenizer_options.vocab_file},
                           {"task", a.task},
                           {"micro_batch_size", mbs},
                           {"lr", a.lr},
                           {"seed", a.seed}};
    ckpt::save_checkpoint(a.save, {iteration, iteration * mbs, 0, a.seed, args, nlohmann::json(), -1,
                                   tokenizer_files(tokenizer_options)}, params, &optimizer);
  };
  result.losses = run_finetune_epochs(a, config, n, iters_per_epoch, params, *net, optimizer, step_for, save,
                                      evaluate, say);
  return result;
}

}  // namespace tessera::tasks
