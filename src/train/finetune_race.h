// `tessera finetune --task RACE`: Megatron's tasks/race (tasks/finetune_utils.py, tasks/eval_utils.py)
// in one process. A pretrained BERT checkpoint (--pretrained-checkpoint, saved by pretrain_bert) gives
// the encoder and pooler by parameter name; its masked-LM and sentence-order heads are discarded and the
// multiple-choice head (and, from a BERT without the binary head, the token types and pooler) start from
// their initialisation. The model is the "bert_multiple_choice" family (model/multiple_choice_model.h).
//
// Training: --epochs passes over the questions of --train-data (RACE directories, read as
// data/race_dataset.h), each epoch in the order of NumPy's RandomState(seed + epoch).shuffle (Megatron's
// DistributedSampler draws torch.randperm with that seed instead), micro-batches of --micro-batch-size
// questions (4 sequences each), the last partial one dropped unless --keep-last; one AdamW step per
// micro-batch on the mean cross-entropy over its questions; the learning rate warms up over
// --lr-warmup-fraction of the iterations and decays (--lr-decay-style) to --min-lr at the last one.
// After every epoch: a checkpoint with --save, then the accuracy on each --valid-data directory and
// overall, in Megatron's lines:
//   calculating metrics ...
//    > |epoch: 0| metrics for dev-middle: correct / total = 70 / 100 = 70.0000 %, elapsed time (sec): 1.234
//    >> |epoch: 0| overall: correct / total = 140 / 200 = 70.0000 %
// --epochs 0 only evaluates (epoch -1), e.g. a fine-tuned checkpoint given as --pretrained-checkpoint.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "data/race_dataset.h"
#include "model/language_model.h"
#include "model/parameters.h"
#include "optim/adamw_optimizer.h"

namespace tessera::train {

// Questions `indices` of `samples` as one micro-batch: kRaceChoices rows per question, in order, and
// choice_label. Token types are 0 on padding (the model ignores padded keys; Megatron pads them with the
// pad id, which is 0 for BERT's vocabularies).
model::MicroBatch multiple_choice_micro_batch(const std::vector<data::MultipleChoiceSample>& samples,
                                              std::span<const int64_t> indices);

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
  std::vector<std::string> train_data, valid_data;
  std::string pretrained_checkpoint;
  std::string save;  // empty: no checkpoints
  int64_t epochs = 0;
  int64_t micro_batch_size = 0;  // questions
  bool keep_last = false;
  int64_t seq_length = 0;        // 0: the pretrained model's
  float lr = 0, min_lr = 0;
  std::string lr_decay_style = "linear";
  double lr_warmup_fraction = 0;
  optim::AdamWConfig adam;
  float hidden_dropout = 0.1f, attention_dropout = 0.1f;
  std::string tokenizer_type, vocab_file;  // empty: the pretrained checkpoint's
  uint64_t seed = 1234;
  int64_t log_interval = 100;
};

// Every rule, as `--flag=value: rule` Errors, before anything is read.
void validate(const FinetuneArguments& a);

struct SubsetAccuracy {
  std::string name;
  int64_t correct = 0, total = 0;
};
struct EpochMetrics {
  int64_t epoch = 0;
  std::vector<SubsetAccuracy> subsets;  // one per --valid-data directory, then "overall"
};
struct FinetuneResult {
  std::vector<EpochMetrics> metrics;
  std::vector<double> losses;  // per iteration
};

// Runs the task; `say` receives each line of output.
FinetuneResult finetune_race(const FinetuneArguments& args, const std::function<void(const std::string&)>& say);

}  // namespace tessera::train
