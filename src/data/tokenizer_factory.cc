#include "data/tokenizer_factory.h"

#include <cstdint>

#include "core/check.h"
#include "data/bert_wordpiece_tokenizer.h"
#include "data/gpt2_bpe_tokenizer.h"
#include "data/null_tokenizer.h"
#include "data/sentencepiece_tokenizer.h"

namespace tessera::data {

std::unique_ptr<Tokenizer> build_tokenizer(const TokenizerOptions& o) {
  if (o.type == "GPT2BPETokenizer") {
    TESSERA_CHECK(!o.vocab_file.empty(), "--tokenizer-type GPT2BPETokenizer needs --vocab-file");
    TESSERA_CHECK(!o.merge_file.empty(), "--tokenizer-type GPT2BPETokenizer needs --merge-file");
    return std::make_unique<Gpt2BpeTokenizer>(o.vocab_file, o.merge_file);
  }
  if (o.type == "NullTokenizer") {
    TESSERA_CHECK(o.vocab_size != 0, "--tokenizer-type NullTokenizer needs --vocab-size");
    TESSERA_CHECK(o.vocab_size > 0 && o.vocab_size < INT32_MAX, "--vocab-size=", o.vocab_size,
                  ": must be positive and below 2^31 - 1 for the NullTokenizer (its ids are 32-bit)");
    return std::make_unique<NullTokenizer>(static_cast<int32_t>(o.vocab_size));
  }
  if (auto lower_case = bert_wordpiece_lower_case_from_name(o.type)) {
    TESSERA_CHECK(!o.vocab_file.empty(), "--tokenizer-type ", o.type, " needs --vocab-file (BERT's vocab.txt)");
    return std::make_unique<BertWordPieceTokenizer>(o.vocab_file, *lower_case);
  }
  if (auto flavor = sentencepiece_flavor_from_name(o.type)) {
    TESSERA_CHECK(!o.tokenizer_model.empty(), "--tokenizer-type ", o.type, " needs --tokenizer-model");
    return std::make_unique<SentencePieceTokenizer>(o.tokenizer_model, *flavor);
  }
  throw Error(str_cat("--tokenizer-type=", o.type.empty() ? "(none)" : o.type,
                      ": must be GPT2BPETokenizer, SentencePieceTokenizer, GPTSentencePieceTokenizer, "
                      "Llama2Tokenizer, BertWordPieceLowerCase, BertWordPieceCase or NullTokenizer"));
}

}  // namespace tessera::data
