// A toy WordPiece vocabulary and sentence-split corpora for the BERT dataset tests
// (bert_dataset_test.cc: against Megatron's Python; bert_dataset_invariants_test.cc: invariants, cache).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>

#include "data/bert_dataset.h"
#include "data/gpt_dataset_testing.h"
#include "core/testing.h"

namespace tessera::data::bert_testing {

using ::tessera::testing::error_of;

// Runs testdata/bert_reference.py <args> --out `out_dir`; "" on success, else why not.

// ---- a toy WordPiece vocabulary ----

// 0 [PAD], 1 [UNK], 2 [CLS], 3 [SEP], 4 [MASK], word starts 5..59, "##" pieces 60..99.
constexpr int32_t kPad = 0, kCls = 2, kSep = 3, kMask = 4, kVocab = 100;
constexpr int32_t kFirstWord = 5, kFirstPiece = 60;

inline std::string toy_token(int32_t id) {
  static const char* special[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  if (id < kFirstWord) return special[id];
  if (id < kFirstPiece) return str_cat("w", id);
  return str_cat("##p", id);
}

inline void write_vocab(const std::string& path) {
  std::ofstream out(path);
  for (int32_t id = 0; id < kVocab; ++id) out << toy_token(id) << "\n";
}

inline std::shared_ptr<const MaskingVocabulary> toy_vocab() {
  return std::make_shared<const MaskingVocabulary>(make_masking_vocabulary(kVocab, toy_token, kCls, kSep, kMask, kPad));
}

// ---- sentence-split corpora ----

struct CorpusShape {
  int docs = 60;
  int min_sentences = 1, max_sentences = 8;
  int min_length = 2, max_length = 30;
  double long_sentence_prob = 0.0;  // a sentence of 513..700 tokens
  double leading_piece_prob = 0.05;   // a sentence that starts with a "##" piece
};

// Words of one start id and 0-3 "##" pieces; one sequence per sentence.
inline void write_corpus(const std::string& prefix, const CorpusShape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  const auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const auto chance = [&](double p) { return std::uniform_real_distribution<double>(0.0, 1.0)(rng) < p; };
  IndexedDatasetBuilder b(prefix, TokenDType::kUInt16);
  for (int d = 0; d < shape.docs; ++d) {
    const int sentences = uniform(shape.min_sentences, shape.max_sentences);
    for (int s = 0; s < sentences; ++s) {
      const int length =
          chance(shape.long_sentence_prob) ? uniform(513, 700) : uniform(shape.min_length, shape.max_length);
      std::vector<int32_t> tokens;
      if (chance(shape.leading_piece_prob)) tokens.push_back(uniform(kFirstPiece, kVocab - 1));
      while (static_cast<int>(tokens.size()) < length) {
        tokens.push_back(uniform(kFirstWord, kFirstPiece - 1));
        const int pieces = std::min(uniform(0, 3) == 0 ? uniform(1, 3) : 0, length - static_cast<int>(tokens.size()));
        for (int p = 0; p < pieces; ++p) tokens.push_back(uniform(kFirstPiece, kVocab - 1));
      }
      b.add_item(tokens);
    }
    b.end_document();
  }
  b.finalize();
}

}  // namespace tessera::data::bert_testing
