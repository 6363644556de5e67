// libFuzzer target: SentencePiece encoding (data::SentencePieceTokenizer) of arbitrary bytes, in the
// Megatron flavor (special tokens cut out of the text) and the GPT flavor (Llama2 is GPT with the bos id
// first). The model is trained once at start-up (SentencePiece's BPE trainer on a small built-in text,
// so the target needs no file), lossless: identity normalisation, whitespace kept and byte fallback,
// for which sentencepiece_tokenizer.h promises decode(encode(x)) == x for valid UTF-8. Every input must
// encode to ids in the vocabulary that decode without error; with the GPT flavor valid UTF-8 must come
// back unchanged, unless it holds U+2581 ("▁", SentencePiece's stand-in for the space, which decodes to
// a space). Built and run by scripts/fuzz.sh.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "data/gpt2_bpe_tokenizer.h"  // replace_invalid_utf8, to tell valid UTF-8
#include "data/sentencepiece_tokenizer.h"

namespace {

namespace fs = std::filesystem;
using tessera::data::SentencePieceFlavor;
using tessera::data::SentencePieceTokenizer;

std::unique_ptr<SentencePieceTokenizer> megatron, gpt;

void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "sentencepiece_fuzzer: invariant broken: %s\n", what);
  std::abort();
}

// A few thousand words of varied text: ASCII words and punctuation, digits, accented and CJK letters,
// so the trainer makes merges of several scripts.
std::string training_text() {
  const char* words[] = {"the", "jury", "said", "it", "did", "find", "that", "many", "of", "Georgia's",
                         "registration", "and", "election", "laws", "are", "outmoded", "or", "inadequate",
                         "1961", "42", "café", "naïve", "über", "日本語", "テキスト", "данные", "—", "(", ")", ",", "."};
  std::string text;
  uint32_t x = 12345;
  for (int line = 0; line < 400; ++line) {
    for (int w = 0; w < 12; ++w) {
      x = x * 1103515245u + 12345u;
      text += words[(x >> 16) % (sizeof words / sizeof *words)];
      text += w == 11 ? "\n" : " ";
    }
  }
  return text;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const fs::path dir = fs::temp_directory_path() / ("tessera_spm_fuzz_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "corpus.txt") << training_text();
  tessera::data::SentencePieceTrainOptions o;
  o.input = {(dir / "corpus.txt").string()};
  o.model_prefix = (dir / "lossless").string();
  o.vocab_size = 400;
  o.model_type = "bpe";
  o.num_threads = 1;
  o.character_coverage = 1.0;
  o.normalization_rule_name = "identity";
  o.remove_extra_whitespaces = false;
  o.byte_fallback = true;
  o.user_defined_symbols = {"<|user|>"};
  const std::string model = tessera::data::train_sentencepiece(o).model_path;
  megatron = std::make_unique<SentencePieceTokenizer>(model, SentencePieceFlavor::kMegatron, 3);
  gpt = std::make_unique<SentencePieceTokenizer>(model, SentencePieceFlavor::kGpt);
  std::error_code ec;
  fs::remove_all(dir, ec);  // the tokenizers hold the model in memory
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const SentencePieceTokenizer* t : {megatron.get(), gpt.get()}) {
    const std::vector<int32_t> ids = t->encode(text);
    for (int32_t id : ids) require(id >= 0 && id < t->vocab_size(), "ids are in the vocabulary");
    const std::string back = t->decode(ids);
    if (t == gpt.get()) {
      std::string storage;
      if (tessera::data::replace_invalid_utf8(text, storage).data() == text.data() &&  // valid UTF-8
          text.find("\xe2\x96\x81") == std::string_view::npos)
        require(back == text, "decode(encode(x)) == x for valid UTF-8 with the lossless model");
    }
  }
  return 0;
}
