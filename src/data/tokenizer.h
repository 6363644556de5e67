// The tokenizer interface of the data layer: text to token ids and back. GPT-2's byte-level BPE
// (gpt2_bpe_tokenizer.h) implements it; SentencePiece and the NullTokenizer of mock data will too.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Token ids of `text` (UTF-8). Implementations are safe to call from several threads at once.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // The bytes the ids stand for; throws tessera::Error on an id outside [0, vocab_size()).
  virtual std::string decode(std::span<const int32_t> ids) const = 0;

  virtual int32_t vocab_size() const = 0;
  // The end-of-document id that `preprocess --append-eod` appends and `--eod-mask-loss` masks.
  virtual int32_t eod() const = 0;
  // Megatron's --tokenizer-type value, e.g. "GPT2BPETokenizer".
  virtual std::string_view name() const = 0;

  // BERT's special ids (Megatron's tokenizer.cls, .sep, .mask, .pad), -1 for a tokenizer without them.
  virtual int32_t cls() const { return -1; }
  virtual int32_t sep() const { return -1; }
  virtual int32_t mask() const { return -1; }
  virtual int32_t pad() const { return -1; }
  // The vocabulary entry of one id (Megatron's inv_vocab[id]), e.g. "##ing" for a WordPiece
  // continuation; by default the id's decoded text.
  virtual std::string token_text(int32_t id) const { return decode(std::span<const int32_t>(&id, 1)); }
};

}  // namespace tessera::data
