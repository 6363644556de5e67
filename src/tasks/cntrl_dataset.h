// The fine-tuning data of MEGATRON-CNTRL's three learned stages, read from the JSONL files of
// `tessera cntrl preprocess` (tasks/cntrl.h), and the text formats the stages are trained and run with.
//
// Keyword predictor and conditional generator: GPT fine-tuned on (prompt, target) pairs, the loss on the
// target's tokens and the end-of-document id after them (tasks/finetune_lm.h):
//   keywords:  prompt "s_1 ... s_{i-1} Keywords:"                 target " k_1, k_2, k_3"
//   generator: prompt "Knowledge: n_1. n_2. Story: s_1 ... s_{i-1}" target " s_i"
// Knowledge ranker: a BERT multiple-choice model (model/multiple_choice_model.h) scoring one sequence
// per knowledge sentence, [CLS] knowledge [SEP] context [SEP] (the short text first, as RACE's question
// and option before its article; a long context keeps its last sentences). It is trained on questions of
// `choices` sequences: a pseudo-positive of the ranker file (the knowledge most similar to the gold next
// sentence) among negatives drawn from the same line's other knowledge, topped up from other lines' when
// it has too few, the positive at a random place. A line without a positive or without knowledge gives
// no question.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "tasks/race_dataset.h"

namespace tessera::tasks {

std::string cntrl_keyword_prompt(const std::string& context);
std::string cntrl_keyword_target(const std::vector<std::string>& keywords);
// The keywords of a generated target: split at commas, trimmed, lower-cased, empty and repeated ones dropped.
std::vector<std::string> parse_cntrl_keywords(const std::string& generated);
std::string cntrl_generator_prompt(const std::string& context, const std::vector<std::string>& knowledge);

struct PromptTarget {
  std::string prompt, target;
};

// A keywords or generator file of `cntrl preprocess` as pairs; `kind` is "keywords" or "generator".
// Errors name the file and line (bad JSON, a missing or mistyped field) and an empty file.
std::vector<PromptTarget> read_cntrl_pairs(const std::string& path, const std::string& kind);

// One ranker sequence: [CLS] knowledge [SEP] context [SEP], padded to max_seq_length; of the context,
// the ids that fit, from its end.
TokensTypesPaddings cntrl_ranker_sequence(const std::string& knowledge, const std::string& context,
                                          const data::Tokenizer& tokenizer, int64_t max_seq_length);

// A ranker file of `cntrl preprocess` as questions of `choices` sequences (see above), drawn with `seed`.
std::vector<MultipleChoiceSample> read_cntrl_ranker_questions(const std::string& path, const data::Tokenizer& tokenizer,
                                                              int64_t max_seq_length, int64_t choices,
                                                              uint64_t seed);

}  // namespace tessera::tasks
