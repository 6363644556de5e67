// Megatron's zero-shot datasets (tasks/zeroshot_gpt/datasets.py), sample for sample.
//
// WIKITEXT103 (_LMDataset): the detokenized file is one token stream, cut into windows of seq + 1
// tokens that start every `overlapping_eval` tokens. The first window scores all its seq targets,
// each later one only its last `overlapping_eval` targets (the rest were scored already, and now
// serve as context); the last window is padded with the pad id, which is not scored.
//
// LAMBADA (_LambadaDataset): each passage's last word is predicted from the rest. Non-strict: the
// last token of the tokenized passage. Strict: the whole last word, tokenized separately as
// " word", all of whose tokens must be predicted. A sample is its tokens padded to seq + 1, with
// only the label positions scored.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace tessera::eval {

struct EvalSample {
  std::vector<int32_t> tokens;  // seq + 1 ids: inputs are tokens[0..seq), labels tokens[1..seq]
  std::vector<float> mask;      // seq: 1 where the label is scored
};

class LmWindows {
 public:
  // overlapping_eval 0 means seq_length (no overlap), as Megatron's None.
  LmWindows(std::vector<int32_t> tokens, int64_t seq_length, int32_t pad_id, int64_t overlapping_eval);
  int64_t size() const { return total_sequences_; }
  EvalSample at(int64_t index) const;
  int64_t num_tokens() const { return static_cast<int64_t>(tokens_.size()); }

 private:
  std::vector<int32_t> tokens_;
  int64_t seq_length_, overlapping_eval_, total_sequences_;
  int32_t pad_id_;
};

// The text of a WikiText file prepared as Megatron does: its word count before detokenization
// (len(text.strip().split(" "))) and the tokens of the detokenized text.
struct WikitextData {
  int64_t num_original_tokens = 0;
  std::vector<int32_t> tokens;
};
WikitextData load_wikitext(const std::string& path, const data::Tokenizer& tokenizer);

// Megatron's count of original tokens: Python's len(text.strip().split(" ")).
int64_t count_original_tokens(const std::string& text);

struct LambadaExample {
  std::vector<int32_t> context, label;
};
// One passage (the "text" of a line of lambada_test.jsonl).
LambadaExample lambada_example(const std::string& text, const data::Tokenizer& tokenizer, bool strict);
// Every line of a jsonl file; errors name the file and line.
std::vector<LambadaExample> load_lambada(const std::string& path, const data::Tokenizer& tokenizer, bool strict);
// The sample of an example: context + label padded to seq + 1. An example longer than that keeps
// its last seq + 1 tokens (Megatron has no rule for it: its batches would fail to collate).
EvalSample lambada_sample(const LambadaExample& e, int64_t seq_length, int32_t pad_id);

}  // namespace tessera::eval
