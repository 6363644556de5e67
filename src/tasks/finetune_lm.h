// `tessera finetune --task CNTRL-KEYWORDS | CNTRL-GENERATOR`: a pretrained GPT fine-tuned on (prompt,
// target) pairs, MEGATRON-CNTRL's keyword predictor and conditional generator (their text formats are
// tasks/cntrl_dataset.h; --train-data and --valid-data are keywords or generator files of `tessera cntrl
// preprocess`).
//
// Each pair is one sequence: the prompt's ids, the target's, then the end-of-document id, the loss on the
// target's ids and the end of document only (the model learns to continue a prompt and to stop). A pair
// longer than --seq-length + 1 ids drops the start of its prompt (the context's oldest words), then the
// end of its target. Shorter sequences are padded with the end-of-document id, outside the loss.
//
// Training is finetune_race's loop: --epochs passes in NumPy's RandomState(seed + epoch) order, one AdamW
// step per micro-batch on the mean loss over its target tokens, the same schedule and log line. After
// every epoch: a checkpoint with --save (a GPT checkpoint `generate`, `serve` and `cntrl generate` load,
// with the pretrained model's tokenizer), then Megatron's validation line per --valid-data file:
//    validation loss at epoch 0 on NAME | lm loss value: ... | lm loss PPL: ... |
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "model/language_model.h"
#include "tasks/cntrl_dataset.h"
#include "tasks/finetune.h"

namespace tessera::tasks {

struct TokenizedPair {
  std::vector<int32_t> ids;  // prompt, target, end of document: at most seq_length + 1
  int64_t target_start = 0;  // index in ids of the target's first id
};
TokenizedPair tokenize_pair(const tasks::PromptTarget& pair, const data::Tokenizer& tokenizer, int64_t seq_length);

// Pairs `indices` as a [rows, seq_length] micro-batch: tokens ids[0..n-2], labels ids[1..n-1], the loss
// mask 1 where the label is a target id or the end of document; padding with `pad`.
model::MicroBatch prompt_target_micro_batch(const std::vector<TokenizedPair>& pairs, std::span<const int64_t> indices,
                                            int64_t seq_length, int32_t pad);

FinetuneResult finetune_conditional_lm(const FinetuneArguments& a,
                                       const std::function<void(const std::string&)>& say);

}  // namespace tessera::tasks
