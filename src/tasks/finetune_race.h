// `tessera finetune --task RACE`: Megatron's tasks/race (tasks/finetune_utils.py, tasks/eval_utils.py)
// in one process. A pretrained BERT checkpoint (--pretrained-checkpoint, saved by pretrain_bert) gives
// the encoder and pooler by parameter name; its masked-LM and sentence-order heads are discarded and the
// multiple-choice head (and, from a BERT without the binary head, the token types and pooler) start from
// their initialisation. The model is the "bert_multiple_choice" family (model/multiple_choice_model.h).
//
// Training: --epochs passes over the questions of --train-data (RACE directories, read as
// tasks/race_dataset.h), each epoch in the order of NumPy's RandomState(seed + epoch).shuffle (Megatron's
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
//
// --task CNTRL-RANKER trains MEGATRON-CNTRL's contextual knowledge ranker the same way: --train-data and
// --valid-data are ranker files of `tessera cntrl preprocess`, each line a question of --ranker-choices
// knowledge sentences, its pseudo-positive the right choice (tasks/cntrl_dataset.h); a validation file's
// name in the metrics lines is its stem.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/language_model.h"
#include "tasks/finetune.h"
#include "tasks/race_dataset.h"

namespace tessera::tasks {

// Questions `indices` of `samples` as one micro-batch: kRaceChoices rows per question, in order, and
// choice_label. Token types are 0 on padding (the model ignores padded keys; Megatron pads them with the
// pad id, which is 0 for BERT's vocabularies).
model::MicroBatch multiple_choice_micro_batch(const std::vector<tasks::MultipleChoiceSample>& samples,
                                              std::span<const int64_t> indices);

// Runs RACE or CNTRL-RANKER (a ranker file of `tessera cntrl preprocess` as questions,
// tasks/cntrl_dataset.h); `say` receives each line of output.
FinetuneResult finetune_multiple_choice(const FinetuneArguments& args, const std::function<void(const std::string&)>& say);

}  // namespace tessera::tasks
