// Megatron's NullTokenizer (--tokenizer-type NullTokenizer --vocab-size N): text is a list of ids
// separated by spaces; ids 0..N-1 are ordinary and N is the end-of-document id.
#pragma once

#include "data/tokenizer.h"

namespace tessera::data {

class NullTokenizer final : public Tokenizer {
 public:
  explicit NullTokenizer(int32_t vocab_size);  // without the end-of-document id

  std::vector<int32_t> encode(std::string_view text) const override;  // throws on a non-integer or bad id
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t vocab_size() const override { return vocab_size_ + 1; }
  int32_t eod() const override { return vocab_size_; }
  std::string_view name() const override { return "NullTokenizer"; }

 private:
  int32_t vocab_size_;
};

}  // namespace tessera::data
