// libFuzzer target: BERT WordPiece encoding (data::BertWordPieceTokenizer, both casings, with
// bert-base-uncased's vocab.txt) of arbitrary bytes. Every input must encode to ids of the file's
// pieces (never the added [BOS]/[EOS]), the same ids each time, pieces that tokenize() names alike, and
// decode without error. The vocabulary is read from $TESSERA_DATA_CACHE/bert
// (scripts/fetch_bert_vocab.sh fetches it); without it the target says so and exits 77, which
// scripts/fuzz.sh reports as skipped. Built and run by scripts/fuzz.sh.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "data/bert_wordpiece_tokenizer.h"

namespace {

std::unique_ptr<tessera::data::BertWordPieceTokenizer> lower, cased;

void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "bert_wordpiece_fuzzer: invariant broken: %s\n", what);
  std::abort();
}

void check(const tessera::data::BertWordPieceTokenizer& t, std::string_view text) {
  const std::vector<int32_t> ids = t.encode(text);
  for (int32_t id : ids) require(id >= 0 && id < t.bos(), "ids are pieces of the vocabulary file");
  require(t.encode(text) == ids, "encoding again gives the same ids");
  const std::vector<std::string> pieces = t.tokenize(text);
  require(pieces.size() == ids.size(), "tokenize() gives a piece per id");
  for (size_t i = 0; i < ids.size(); ++i) require(t.token(ids[i]) == pieces[i], "each id is its piece");
  (void)t.decode(ids);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* cache = std::getenv("TESSERA_DATA_CACHE");
  const std::filesystem::path vocab =
      std::filesystem::path(cache ? cache : "data-cache") / "bert" / "bert-base-uncased-vocab.txt";
  if (!std::filesystem::exists(vocab)) {
    std::fprintf(stderr, "bert_wordpiece_fuzzer: skipped: no %s (set TESSERA_DATA_CACHE; "
                 "scripts/fetch_bert_vocab.sh fetches it)\n", vocab.c_str());
    std::exit(77);
  }
  lower = std::make_unique<tessera::data::BertWordPieceTokenizer>(vocab.string(), true);
  cased = std::make_unique<tessera::data::BertWordPieceTokenizer>(vocab.string(), false);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  check(*lower, text);
  check(*cased, text);
  return 0;
}
