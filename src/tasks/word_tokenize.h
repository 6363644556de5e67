// English word tokenization in the manner of NLTK's word_tokenize (Treebank conventions), which
// Megatron's MSDP uses on prompts and reference responses: punctuation split from words, double quotes
// as `` and '', contractions split ("do n't", "it 's", "can not"), and a sentence's final period split
// off. NLTK first splits sentences with its Punkt model; here a period ends a sentence when it ends the
// text or the next word starts with an upper-case letter and the word is not an initial ("J."). That and
// Punkt's abbreviation list are the differences from NLTK's output.
#pragma once

#include <string>
#include <vector>

namespace tessera::tasks {

std::vector<std::string> word_tokenize(const std::string& text);
// The tokens joined by single spaces (" ".join(word_tokenize(text))).
std::string word_tokenized(const std::string& text);

}  // namespace tessera::tasks
