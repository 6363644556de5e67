// `tessera finetune`: Megatron's tasks/main.py, one process. What every task shares: the arguments and
// their rules, the pretrained weights loaded by name, the learning-rate schedule and the log line. The
// tasks are multiple choice with a BERT (RACE, CNTRL-RANKER: tasks/finetune_race.h) and a GPT trained on
// prompt and target pairs (CNTRL-KEYWORDS, CNTRL-GENERATOR: tasks/finetune_lm.h).
#pragma once

#include <map>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "data/tokenizer_factory.h"
#include "model/config.h"
#include "model/language_model.h"
#include "model/parameters.h"
#include "optim/adamw_optimizer.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"

namespace tessera::tasks {

// Copies every parameter the checkpoint has (by name; a vocabulary padded differently copies the rows
// both have) and says which it lacks (kept as initialised) and which of its tensors the model has no use
// for (discarded). A tensor of another shape is an Error naming it.
struct PretrainedLoad {
  int64_t iteration = 0;
  std::vector<std::string> loaded, initialised, discarded;
};
PretrainedLoad load_pretrained_weights(const std::string& dir, model::ParameterSet& params);

struct FinetuneArguments {
  std::string task = "RACE";
  int64_t ranker_choices = 4;  // CNTRL-RANKER: sequences per training question
  std::vector<std::string> train_data, valid_data;
  std::string pretrained_checkpoint;
  std::string save;  // empty: no checkpoints
  int64_t epochs = 0;
  int64_t micro_batch_size = 0;  // questions (RACE, CNTRL-RANKER) or sequences
  bool keep_last = false;
  int64_t seq_length = 0;        // 0: the pretrained model's
  float lr = 0, min_lr = 0;
  std::string lr_decay_style = "linear";
  double lr_warmup_fraction = 0;
  optim::AdamWConfig adam;
  float hidden_dropout = 0.1f, attention_dropout = 0.1f;
  // Empty: the pretrained checkpoint's.
  std::string tokenizer_type, vocab_file, merge_file, tokenizer_model;
  uint64_t seed = 1234;
  int64_t log_interval = 100;
};

// Every rule, as `--flag=value: rule` Errors, before anything is read.
void validate(const FinetuneArguments& a);

// Iterations per epoch of n training examples (a partial last micro-batch with --keep-last); an Error
// naming --micro-batch-size when training would have none. `examples` names them in the message.
int64_t finetune_iters_per_epoch(const FinetuneArguments& a, int64_t n, const char* examples);

// Loads --pretrained-checkpoint into params by name and says what was loaded and what stays initialised;
// with `discarded_by`, also the checkpoint's tensors that model has no use for.
void load_pretrained_and_report(const FinetuneArguments& a, model::ParameterSet& params, const char* discarded_by,
                                const std::function<void(const std::string&)>& say);

struct SubsetAccuracy {
  std::string name;
  int64_t correct = 0, total = 0;
};
struct EpochMetrics {
  int64_t epoch = 0;
  std::vector<SubsetAccuracy> subsets;  // one per --valid-data directory, then "overall"
};
struct FinetuneResult {
  std::vector<EpochMetrics> metrics;  // multiple choice
  std::vector<double> valid_losses;   // conditional LM: per epoch (or -1), over every --valid-data file
  std::vector<double> losses;         // per iteration
};

// The tokenizer: the flags given, what they leave out from the pretrained checkpoint (`recorded`, its
// arguments; `carried`, the tokenizer files it carries, preferred to the paths it records).
data::TokenizerOptions finetune_tokenizer_options(const FinetuneArguments& a, const nlohmann::json& recorded,
                                                  const std::map<std::string, std::string>& carried);
// The tokenizer files a fine-tuned checkpoint carries (ckpt::TrainingState::tokenizer_files).
std::map<std::string, std::string> tokenizer_files(const data::TokenizerOptions& o);

// Megatron's schedule counts samples: decay over every iteration's, warm-up over the fraction of them.
optim::LrSchedule finetune_lr_schedule(const FinetuneArguments& a, int64_t train_iters);

// Megatron's iteration line for the last `iterations` iterations of `rows` sequences each.
std::string finetune_iteration_line(const FinetuneArguments& a, const model::ModelConfig& config, int64_t iteration,
                                    int64_t train_iters, int64_t rows, int64_t iterations, double seconds, float lr,
                                    double mean_loss, const optim::StepResult& step);

// One training micro-batch of a task: the batch, its forward context's offset and shape, the batch size
// the iteration line reports, and what the objective averages over (target tokens, or questions).
struct FinetuneStep {
  model::MicroBatch mb;
  int64_t sample_offset = 0, seq = 0, rows = 0;  // the ForwardContext's
  int64_t logged_rows = 0;
  double normalizer = 1;  // the loss is the micro-batch's sum over this
};

// Megatron's epoch loop (tasks/finetune_utils.py): --epochs passes over the n training examples in
// NumPy's shuffled order (seed --seed + epoch), one optimizer step per micro-batch of
// --micro-batch-size, the iteration line every --log-interval, then `save(iteration)` (with --save) and
// `evaluate(epoch, iteration)` after each epoch; with --epochs 0, evaluation-only mode: one evaluation as
// epoch -1. `step_for(examples, first)` builds the micro-batch of the shuffled `examples`, the first of
// which is number `first` of its epoch. Returns the loss of every iteration.
std::vector<double> run_finetune_epochs(
    const FinetuneArguments& a, const model::ModelConfig& config, int64_t n, int64_t iters_per_epoch,
    model::ParameterSet& params, model::LanguageModelChunk& net, optim::AdamWOptimizer& optimizer,
    const std::function<FinetuneStep(std::span<const int64_t>, int64_t)>& step_for,
    const std::function<void(int64_t)>& save, const std::function<void(int64_t, int64_t)>& evaluate,
    const std::function<void(const std::string&)>& say);

// Runs --task; `say` receives each line of output.
FinetuneResult finetune(const FinetuneArguments& a, const std::function<void(const std::string&)>& say);

}  // namespace tessera::tasks
