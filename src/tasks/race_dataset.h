// The RACE reading-comprehension data set as Megatron's tasks/race/data.py reads it, and the BERT
// sequences of tasks/data_utils.py.
//
// A RACE directory (RACE/train/middle, RACE/dev/high, ...) holds *.txt files, each one JSON object per
// line: {"article": ..., "questions": [...], "options": [[4 strings], ...], "answers": ["A".."D", ...],
// "id": ...}. Every question gives one sample of 4 sequences, one per option:
//   qa = question with every "_" replaced by the option (a cloze question), else question + " " + option;
//   qa cleaned (clean_text), tokenized and cut to max_qa_length (128) ids; the article cleaned and
//   tokenized once; then [CLS] qa [SEP] article [SEP] (build_tokens_types_paddings).
// The label is ord(answer) - ord('A'). Files are read in sorted order (Megatron's glob order is the
// file system's); uid counts the samples of one directory from 0, as Megatron's.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace tessera::tasks {

inline constexpr int kRaceChoices = 4;
inline constexpr int64_t kRaceMaxQaLength = 128;

// Megatron's clean_text: "\n" -> " ", every run of whitespace (Python's \s: ASCII and Unicode spaces)
// -> one space, then three passes of " . " -> ". ".
std::string clean_text(std::string_view text);

// One BERT sequence of max_seq_length ids, its token types and padding mask (1 on tokens).
struct TokensTypesPaddings {
  std::vector<int32_t> ids, types, paddings;
};

// Megatron's build_tokens_types_paddings_from_ids: [CLS] a [SEP] (types 0), then b (types 1) when given;
// when that is max_seq_length ids or more it is cut to max_seq_length - 1; then [SEP] (type 1 with b,
// else 0, and only with b or after a cut); then padding to max_seq_length with pad id, whose types are
// the pad id too (as Megatron's) and whose padding mask is 0.
TokensTypesPaddings build_tokens_types_paddings(const std::vector<int32_t>& a, const std::vector<int32_t>* b,
                                                int64_t max_seq_length, int32_t cls, int32_t sep, int32_t pad);

// One question: kRaceChoices sequences, the right choice and the sample's number in its directory.
struct MultipleChoiceSample {
  std::vector<TokensTypesPaddings> choices;
  int32_t label = 0;
  int64_t uid = 0;
};

struct RaceReadStats {
  int64_t documents = 0, questions = 0, samples = 0;
  double seconds = 0;
};

// Megatron's process_single_datapath over `dir`'s *.txt files. The tokenizer needs cls(), sep() and
// pad() (BertWordPieceLowerCase / BertWordPieceCase). Errors name the file and line: bad JSON, a missing
// or mistyped field, counts that differ, a question without 4 options, an answer not "A".."D", a
// directory with no *.txt file.
std::vector<MultipleChoiceSample> read_race_directory(const std::string& dir, const data::Tokenizer& tokenizer,
                                                      int64_t max_seq_length, RaceReadStats* stats = nullptr,
                                                      int64_t max_qa_length = kRaceMaxQaLength);

// Megatron's name of a RACE directory in the metrics lines: the path after its last "RACE", without
// leading or trailing '/', with '/' as '-' (".../RACE/dev/middle" -> "dev-middle").
std::string race_dataset_name(const std::string& dir);

}  // namespace tessera::tasks
