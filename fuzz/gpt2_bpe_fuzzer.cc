// libFuzzer target: GPT-2 BPE encoding (data::Gpt2BpeTokenizer, with GPT-2's real vocab.json and
// merges.txt) of arbitrary bytes. Every input must encode to ids in the vocabulary, the same ids each
// time (the per-word cache) and through encode_append, and decode back to the input with invalid UTF-8
// replaced (decode(encode(x)) == x for valid UTF-8). The files are read from
// $TESSERA_DATA_CACHE/gpt2 (scripts/fetch_gpt2_vocab.sh fetches them); without them the target says so
// and exits 77, which scripts/fuzz.sh reports as skipped. Built and run by scripts/fuzz.sh.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "data/gpt2_bpe_tokenizer.h"

namespace {

std::unique_ptr<tessera::data::Gpt2BpeTokenizer> tokenizer;

void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "gpt2_bpe_fuzzer: invariant broken: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* cache = std::getenv("TESSERA_DATA_CACHE");
  const std::filesystem::path dir = std::filesystem::path(cache ? cache : "data-cache") / "gpt2";
  const std::filesystem::path vocab = dir / "gpt2-vocab.json", merges = dir / "gpt2-merges.txt";
  if (!std::filesystem::exists(vocab) || !std::filesystem::exists(merges)) {
    std::fprintf(stderr, "gpt2_bpe_fuzzer: skipped: no %s or %s (set TESSERA_DATA_CACHE; "
                 "scripts/fetch_gpt2_vocab.sh fetches them)\n", vocab.c_str(), merges.c_str());
    std::exit(77);
  }
  tokenizer = std::make_unique<tessera::data::Gpt2BpeTokenizer>(vocab.string(), merges.string());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::vector<int32_t> ids = tokenizer->encode(text);
  for (int32_t id : ids) require(id >= 0 && id < tokenizer->vocab_size(), "ids are in the vocabulary");
  require(tokenizer->encode(text) == ids, "encoding again (from the cache) gives the same ids");
  std::vector<int32_t> appended{tokenizer->eod()};
  tokenizer->encode_append(text, appended);
  require(appended.size() == ids.size() + 1 && std::equal(ids.begin(), ids.end(), appended.begin() + 1),
          "encode_append appends encode's ids");
  std::string storage;
  require(tokenizer->decode(ids) == tessera::data::replace_invalid_utf8(text, storage),
          "decode(encode(x)) is x with invalid UTF-8 replaced");
  return 0;
}
