// Builds the tokenizer Megatron's flags name: --tokenizer-type with its files.
#pragma once

#include <memory>
#include <string>

#include "data/tokenizer.h"

namespace tessera::data {

struct TokenizerOptions {
  std::string type;  // --tokenizer-type: GPT2BPETokenizer, SentencePieceTokenizer (and its GPT/Llama2
                     // variants), BertWordPieceLowerCase,
                     // BertWordPieceCase, NullTokenizer
  std::string vocab_file;       // --vocab-file (GPT-2: encoder.json / vocab.json; BERT: vocab.txt)
  std::string merge_file;       // --merge-file (GPT-2: vocab.bpe / merges.txt)
  std::string tokenizer_model;  // --tokenizer-model (SentencePiece)
  int64_t vocab_size = 0;       // --vocab-size (NullTokenizer)
};

// Checks that the flags the type needs are there (naming the missing one) and loads the files.
std::unique_ptr<Tokenizer> build_tokenizer(const TokenizerOptions& options);

}  // namespace tessera::data
