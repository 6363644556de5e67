// ParlAI's token F1 for dialogue, as Megatron's tasks/msdp/metrics.py computes it: answers normalised
// (lower case, punctuation to spaces, the articles a/an/the dropped, whitespace collapsed), then the
// Counter intersection of guess and answer tokens. F1 scores a generated response against the gold
// response, KF1 against the gold knowledge.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace tessera::tasks {

std::string normalize_answer(const std::string& text);

struct PrecisionRecallF1 {
  double precision = 0, recall = 0, f1 = 0;
};

// One pair: nothing when the answer is empty (the pair does not count), zeros when the guess is.
std::optional<PrecisionRecallF1> token_f1(const std::string& guess, const std::string& answer);

// The means over the pairs that count (an Error when the lists differ in length or none counts).
PrecisionRecallF1 mean_token_f1(const std::vector<std::string>& guesses, const std::vector<std::string>& answers);

}  // namespace tessera::tasks
