#include "data/null_tokenizer.h"

#include <charconv>

#include "core/check.h"

namespace tessera::data {

NullTokenizer::NullTokenizer(int32_t vocab_size) : vocab_size_(vocab_size) {
  TESSERA_CHECK(vocab_size > 0, "--vocab-size=", vocab_size, ": must be positive for the NullTokenizer");
}

std::vector<int32_t> NullTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    if (std::isspace(static_cast<unsigned char>(text[i]))) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < text.size() && !std::isspace(static_cast<unsigned char>(text[end]))) ++end;
    int32_t id = -1;
    auto [ptr, ec] = std::from_chars(text.data() + i, text.data() + end, id);
    TESSERA_CHECK(ec == std::errc() && ptr == text.data() + end && id >= 0 && id <= vocab_size_,
                  "NullTokenizer: '", text.substr(i, end - i), "' is not a token id in [0, ", vocab_size_, "]");
    ids.push_back(id);
    i = end;
  }
  return ids;
}

std::string NullTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    TESSERA_CHECK(ids[i] >= 0 && ids[i] <= vocab_size_, "NullTokenizer: id ", ids[i], " is outside [0, ",
                  vocab_size_, "]");
    if (i) out += ' ';
    out += std::to_string(ids[i]);
  }
  return out;
}

}  // namespace tessera::data
