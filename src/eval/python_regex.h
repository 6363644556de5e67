// Python's str.replace and re.sub, for the text processing that Megatron's Python does (detokenizers,
// NLTK's word tokenizer): PCRE2 in Python's Unicode mode, replacement groups written $1.
#pragma once

#include <string>

namespace tessera::eval {

// Every occurrence of `from` replaced by `to`, left to right.
void replace_all(std::string& s, const std::string& from, const std::string& to);
// re.sub(pattern, replacement, s): every non-overlapping match replaced (an Error on invalid UTF-8).
void regex_sub(std::string& s, const char* pattern, const char* replacement);

}  // namespace tessera::eval
