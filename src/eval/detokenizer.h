// Megatron's zero-shot detokenizers (tasks/zeroshot_gpt/detokenizer.py): undo the tokenization of
// WikiText (" @-@ ", spaces before punctuation, inside brackets and quotes) and PTB before the
// model's own tokenizer sees the text. Same replacements, in the same order, with the same regular
// expressions (PCRE2 in Python's Unicode mode).
#pragma once

#include <string>

namespace tessera::eval {

std::string wikitext_detokenize(std::string text);
std::string ptb_detokenize(std::string text);
inline std::string lambada_detokenize(std::string text) { return text; }

// Megatron's get_detokenizer: the first of "ptb", "wiki", "lambada" that the path contains; the
// identity when none does.
std::string detokenize_for_path(const std::string& path, std::string text);

}  // namespace tessera::eval
