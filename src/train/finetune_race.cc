#include "train/finetune_race.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>

#include "ckpt/checkpoint.h"
#include "core/check.h"
#include "data/numpy_random.h"
#include "data/tokenizer_factory.h"
#include "model/model_factory.h"
#include "model/multiple_choice_model.h"
#include "optim/lr_scheduler.h"
#include "train/argument_rules.h"
#include "train/training_log.h"

namespace tessera::train {
namespace {

using rules::require;

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::string join(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
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
std::vector<data::MultipleChoiceSample> build_race_dataset(const std::string& name,
                                                           const std::vector<std::string>& dirs,
                                                           const data::Tokenizer& tokenizer, int64_t seq_length,
                                                           const std::function<void(const std::string&)>& say) {
  say(str_cat(" > building RACE dataset for ", name, ":"));
  std::string paths = "  > paths:";
  for (const std::string& d : dirs) paths += " " + d;
  say(paths);
  std::vector<data::MultipleChoiceSample> all;
  for (const std::string& dir : dirs) {
    say(str_cat("   > working on ", dir));
    data::RaceReadStats s;
    std::vector<data::MultipleChoiceSample> part = data::read_race_directory(dir, tokenizer, seq_length, &s);
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

struct ValidSet {
  std::string name;
  std::vector<data::MultipleChoiceSample> samples;
};

}  // namespace

model::MicroBatch multiple_choice_micro_batch(const std::vector<data::MultipleChoiceSample>& samples,
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
    const data::MultipleChoiceSample& s = samples.at(static_cast<size_t>(indices[q]));
    TESSERA_CHECK(static_cast<int64_t>(s.choices.size()) == choices, "sample ", s.uid, " has ", s.choices.size(),
                  " choices, the micro-batch's first ", choices);
    mb.choice_label.i32()[q] = s.label;
    for (int64_t c = 0; c < choices; ++c) {
      const data::TokensTypesPaddings& t = s.choices[static_cast<size_t>(c)];
      TESSERA_CHECK(static_cast<int64_t>(t.ids.size()) == seq, "sample ", s.uid, " has a sequence of ", t.ids.size(),
                    " ids, expected ", seq);
      const int64_t row = (q * choices + c) * seq;
      for (int64_t j = 0; j < seq; ++j) {
        const bool token = t.paddings[static_cast<size_t>(j)] != 0;
        mb.tokens.i32()[row + j] = t.ids[static_cast<size_t>(j)];
        mb.token_types.i32()[row + j] = token ? t.types[static_cast<size_t>(j)] : 0;
        mb.padding_mask.i32()[row + j] = token ? 1 : 0;
      }
    }
  }
  return mb;
}

PretrainedLoad load_pretrained_weights(const std::string& dir, model::ParameterSet& params) {
  ckpt::TrainingState state;
  std::vector<std::pair<std::string, Tensor>> saved = ckpt::load_full_model(dir, &state);
  std::map<std::string, Tensor> by_name(saved.begin(), saved.end());
  PretrainedLoad out;
  out.iteration = state.iteration;
  for (model::Parameter& p : params.params()) {
    auto it = by_name.find(p.spec.name);
    if (it == by_name.end()) {
      out.initialised.push_back(p.spec.name);
      continue;
    }
    const Tensor& t = it->second;
    if (t.shape() == p.value.shape()) {
      std::copy(t.f32(), t.f32() + t.numel(), p.value.f32());
    } else {
      // A vocabulary padded to another multiple: the rows both have.
      const bool rows = p.spec.vocab_rows && t.shape().size() == 2 && p.value.shape().size() == 2 &&
                        t.dim(1) == p.value.dim(1);
      TESSERA_CHECK(rows, "checkpoint tensor ", p.spec.name, " in ", dir, " has shape ", shape_str(t.shape()),
                    ", the model expects ", shape_str(p.value.shape()));
      const int64_t n = std::min(t.dim(0), p.value.dim(0)) * t.dim(1);
      std::copy(t.f32(), t.f32() + n, p.value.f32());
    }
    out.loaded.push_back(p.spec.name);
    by_name.erase(it);
  }
  for (const auto& [name, t] : by_name) out.discarded.push_back(name);
  return out;
}

void validate(const FinetuneArguments& a) {
  require(a.task == "RACE", "--task", a.task, "only RACE is implemented");
  require(!a.pretrained_checkpoint.empty(), "--pretrained-checkpoint", a.pretrained_checkpoint,
          "is required (a BERT checkpoint from pretrain_bert, or a fine-tuned one)");
  require(a.epochs >= 0, "--epochs", a.epochs, "must be >= 0");
  require(a.epochs == 0 || !a.train_data.empty(), "--train-data", "", "is required with --epochs > 0");
  require(a.micro_batch_size > 0, "--micro-batch-size", a.micro_batch_size, "must be > 0");
  require(a.seq_length >= 0, "--seq-length", a.seq_length, "must be >= 0 (0: the pretrained model's)");
  require(a.lr >= 0, "--lr", a.lr, "must be >= 0");
  require(a.min_lr >= 0 && a.min_lr <= a.lr, "--min-lr", a.min_lr, "must be in [0, --lr]");
  optim::parse_lr_decay_style(a.lr_decay_style);
  require(a.lr_warmup_fraction >= 0 && a.lr_warmup_fraction < 1, "--lr-warmup-fraction", a.lr_warmup_fraction,
          "must be in [0, 1)");
  require(a.hidden_dropout >= 0 && a.hidden_dropout < 1, "--hidden-dropout", a.hidden_dropout, "must be in [0, 1)");
  require(a.attention_dropout >= 0 && a.attention_dropout < 1, "--attention-dropout", a.attention_dropout,
          "must be in [0, 1)");
  require(a.adam.weight_decay >= 0, "--weight-decay", a.adam.weight_decay, "must be >= 0");
  require(a.adam.clip_grad >= 0, "--clip-grad", a.adam.clip_grad, "must be >= 0");
  require(a.log_interval > 0, "--log-interval", a.log_interval, "must be > 0");
}

FinetuneResult finetune_race(const FinetuneArguments& a, const std::function<void(const std::string&)>& say) {
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

  auto recorded_string = [&](const char* key) {
    return recorded.contains(key) && recorded.at(key).is_string() ? recorded.at(key).get<std::string>() : std::string();
  };
  data::TokenizerOptions tokenizer_options;
  tokenizer_options.type = a.tokenizer_type.empty() ? recorded_string("tokenizer_type") : a.tokenizer_type;
  tokenizer_options.vocab_file = a.vocab_file.empty() ? recorded_string("vocab_file") : a.vocab_file;
  const std::unique_ptr<data::Tokenizer> tokenizer = data::build_tokenizer(tokenizer_options);
  TESSERA_CHECK(tokenizer->vocab_size() == config.vocab_size, "--tokenizer-type ", tokenizer_options.type,
                " has ", tokenizer->vocab_size(), " ids but the pretrained model was trained with ", config.vocab_size);

  // Data (Megatron: the training and validation sets, then each --valid-data directory on its own).
  std::vector<data::MultipleChoiceSample> train;
  if (a.epochs > 0) train = build_race_dataset("training", a.train_data, *tokenizer, config.seq_length, say);
  std::vector<ValidSet> valid;
  for (const std::string& dir : a.valid_data) {
    ValidSet v{data::race_dataset_name(dir), {}};
    v.samples = build_race_dataset(v.name, {dir}, *tokenizer, config.seq_length, say);
    valid.push_back(std::move(v));
  }
  const int64_t mbs = a.micro_batch_size, n = static_cast<int64_t>(train.size());
  const int64_t iters_per_epoch = a.keep_last ? (n + mbs - 1) / mbs : n / mbs;
  require(a.epochs == 0 || iters_per_epoch > 0, "--micro-batch-size", mbs,
          str_cat("leaves no full micro-batch of the ", n, " training questions (--keep-last keeps a partial one)"));
  const int64_t train_iters = a.epochs * iters_per_epoch;

  // Model and optimizer.
  say("building multichoice model for RACE ...");
  model::ParameterSet params;
  const std::unique_ptr<model::LanguageModelChunk> net = model::build_model_chunk(config, params);
  params.allocate(a.seed);
  say(str_cat(" > number of parameters: ", params.numel()));
  const PretrainedLoad load = load_pretrained_weights(a.pretrained_checkpoint, params);
  say(str_cat(" loaded pretrained checkpoint from ", a.pretrained_checkpoint, " at iteration ", load.iteration, ": ",
              load.loaded.size(), " tensors"));
  if (!load.discarded.empty()) say(str_cat(" > not used by the multiple-choice model: ", join(load.discarded)));
  for (const std::string& name : load.initialised)
    say(str_cat(" ***WARNING*** could not find ", name, " in the checkpoint, initializing to random"));
  optim::AdamWOptimizer optimizer(params, a.adam);
  // Megatron's schedule counts samples: decay over every iteration's, warm-up over the fraction of them.
  const int64_t step_samples = mbs;
  optim::LrSchedule schedule;
  schedule.max_lr = a.lr;
  schedule.min_lr = a.min_lr;
  schedule.style = optim::parse_lr_decay_style(a.lr_decay_style);
  schedule.decay_steps = train_iters * step_samples;
  schedule.warmup_steps = static_cast<int64_t>(a.lr_warmup_fraction * static_cast<double>(schedule.decay_steps));

  FinetuneResult result;
  int64_t iteration = 0;
  auto evaluate = [&](int64_t epoch) {
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
        const model::ForwardContext ctx{a.seed, iteration, 0, false, config.seq_length, mb.tokens.dim(0)};
        const Tensor scores = net->score(mb, Tensor(), ctx);
        for (size_t q = 0; q < indices.size(); ++q)
          s.correct += static_cast<int32_t>(scores.f32()[3 * q + 2]) == mb.choice_label.i32()[q] ? 1 : 0;
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

  say("training ...");
  if (a.epochs == 0) {
    say("evaluation only mode, setting epoch to -1");
    evaluate(-1);
    say("done :-)");
    return result;
  }
  double interval_loss = 0, interval_seconds = 0;
  int64_t interval_iters = 0;
  for (int64_t epoch = 0; epoch < a.epochs; ++epoch) {
    say(str_cat("working on epoch ", epoch + 1, " ..."));
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    data::NumpyRandomState rng(static_cast<uint32_t>(a.seed + static_cast<uint64_t>(epoch)));
    rng.shuffle(std::span<int64_t>(order));
    for (int64_t it = 0; it < iters_per_epoch; ++it) {
      const auto start = std::chrono::steady_clock::now();
      const int64_t first = it * mbs, count = std::min(mbs, n - first);
      const model::MicroBatch mb =
          multiple_choice_micro_batch(train, std::span<const int64_t>(order).subspan(static_cast<size_t>(first),
                                                                                     static_cast<size_t>(count)));
      const float lr = schedule.lr(iteration * step_samples);
      model::ForwardContext ctx{a.seed, iteration + 1, 0, true, config.seq_length, mb.tokens.dim(0)};
      params.zero_grad();
      params.weights_changed();
      model::LossSums losses;
      const std::unique_ptr<model::ChunkRecord> rec = net->make_record();
      net->forward(mb, Tensor(), ctx, *rec, losses);
      // The objective is the mean over the micro-batch's questions (torch's CrossEntropyLoss).
      net->backward(*rec, Tensor(), ctx, 1.0f / static_cast<float>(count));
      const optim::StepResult step = optimizer.step(lr);
      ++iteration;
      const double loss = losses.lm / static_cast<double>(count);
      result.losses.push_back(loss);
      interval_loss += loss;
      interval_seconds += seconds_since(start);
      ++interval_iters;
      if (iteration % a.log_interval == 0 || iteration == train_iters) {
        IterationStats s;
        s.iteration = iteration;
        s.train_iters = train_iters;
        s.consumed_samples = iteration * mbs;
        s.global_batch_size = mbs;
        s.elapsed_ms_per_iteration = interval_seconds * 1000 / static_cast<double>(interval_iters);
        s.tflops_per_device = model::model_flops_per_iteration(config, mb.tokens.dim(0)) /
                              (interval_seconds / static_cast<double>(interval_iters)) / 1e12;
        s.learning_rate = lr;
        s.lm_loss = interval_loss / static_cast<double>(interval_iters);
        s.grad_norm = step.grad_norm;
        s.skipped_iterations = step.skipped ? 1 : 0;
        say(format_iteration_line(s));
        interval_loss = interval_seconds = 0;
        interval_iters = 0;
      }
    }
    if (!a.save.empty()) {
      nlohmann::json args = {{"model", model::to_json(config)},
                             {"tokenizer_type", tokenizer_options.type},
                             {"vocab_file", tokenizer_options.vocab_file},
                             {"task", a.task},
                             {"micro_batch_size", mbs},
                             {"lr", a.lr},
                             {"seed", a.seed}};
      ckpt::save_checkpoint(a.save, {iteration, iteration * mbs, 0, a.seed, args, nlohmann::json()}, params,
                            &optimizer);
      say(str_cat(" saved checkpoint at iteration ", iteration, " to ", a.save));
    }
    evaluate(epoch);
  }
  say("done :-)");
  return result;
}

}  // namespace tessera::train
