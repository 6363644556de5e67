// The BERT dataset's invariants (whole sentences, epochs, splits, settings, sample consistency, whole-word
// masking) and its mapping cache.
#include "data/bert_dataset.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "data/bert_dataset_testing.h"
#include "data/gpt_dataset_testing.h"

namespace tessera::data {
namespace {

namespace fs = std::filesystem;
using testing::read_file_bytes;
using testing::read_i64;
using testing::ScratchDir;
using namespace bert_testing;

// ---- invariants ----

// Builds one dataset over a corpus (all documents, train split only).
std::shared_ptr<const BertDataset> make_dataset(const ScratchDir& dir, const std::string& prefix,
                                                std::optional<int64_t> num_samples, BertDatasetConfig config) {
  auto indexed = std::make_shared<const IndexedDataset>(prefix);
  if (config.cache_dir.empty()) config.cache_dir = dir / "cache";
  return std::make_shared<const BertDataset>(indexed, Split::kTrain, DocumentRange{0, indexed->num_documents()},
                                             num_samples, config, toy_vocab());
}

TEST(BertSampleMapping, RowsAreWholeSentencesOfOneKeptDocument) {
  ScratchDir dir;
  const std::string prefix = dir / "corpus";
  CorpusShape shape;
  shape.docs = 200;
  shape.long_sentence_prob = 0.02;
  write_corpus(prefix, shape, 5);
  IndexedDataset indexed(prefix);
  const std::vector<int64_t> boundaries = indexed.document_indices();
  const std::vector<int32_t> sizes = indexed.sequence_lengths();
  for (int32_t min_sent : {1, 2}) {
    const std::vector<int64_t> rows =
        build_bert_sample_mapping(boundaries, sizes, 1, std::numeric_limits<uint64_t>::max(), 61, 0.1, 1234, min_sent);
    // Each kept document is covered exactly once, by consecutive rows of at least min_sent
    // sentences; the others not at all.
    std::map<int64_t, int64_t> cover;  // first sentence -> end
    int64_t short_targets = 0;
    for (size_t r = 0; r < rows.size(); r += 3) {
      EXPECT_TRUE(cover.emplace(rows[r], rows[r + 1]).second);
      EXPECT_GE(rows[r + 2], 2);
      EXPECT_LE(rows[r + 2], 61);
      short_targets += rows[r + 2] < 61;
    }
    int64_t kept = 0, skipped_long = 0;
    for (size_t d = 0; d + 1 < boundaries.size(); ++d) {
      const int64_t first = boundaries[d], last = boundaries[d + 1];
      bool has_long = false;
      for (int64_t s = first; s < last; ++s) has_long |= sizes[s] > kBertLongSentenceLength;
      const bool keep = last - first >= min_sent && !(last - first > 1 && has_long);
      skipped_long += last - first > 1 && has_long;
      int64_t at = first;
      while (at < last && cover.count(at)) {
        EXPECT_GE(cover[at] - at, min_sent);
        EXPECT_LE(cover[at], last) << "a row crosses the end of document " << d;
        at = cover[at];
      }
      if (keep) {
        ++kept;
        EXPECT_EQ(at, last) << "document " << d << " not covered";
      } else {
        EXPECT_EQ(at, first) << "skipped document " << d << " has rows";
      }
    }
    EXPECT_GT(skipped_long, 0);
    EXPECT_GT(kept, 0);
    // short_seq_prob 0.1: about one target in ten is short.
    const double share = static_cast<double>(short_targets) / static_cast<double>(rows.size() / 3);
    EXPECT_GT(share, 0.03);
    EXPECT_LT(share, 0.2);
  }
}

TEST(BertSampleMapping, EpochsUntilEnoughSamplesAndShuffled) {
  ScratchDir dir;
  const std::string prefix = dir / "corpus";
  CorpusShape shape;
  shape.docs = 30;
  write_corpus(prefix, shape, 8);
  IndexedDataset indexed(prefix);
  const auto boundaries = indexed.document_indices();
  const auto sizes = indexed.sequence_lengths();
  const auto one = build_bert_sample_mapping(boundaries, sizes, 1, std::numeric_limits<uint64_t>::max(), 40, 0.1, 7, 2);
  const int64_t per_epoch = static_cast<int64_t>(one.size() / 3);
  ASSERT_GT(per_epoch, 5);
  const auto many = build_bert_sample_mapping(boundaries, sizes, 1000, static_cast<uint64_t>(2 * per_epoch + 1), 40,
                                              0.1, 7, 2);
  // Whole epochs until at least 2 * per_epoch + 1 rows: three epochs (they differ by their targets).
  EXPECT_GE(many.size() / 3, static_cast<size_t>(2 * per_epoch + 1));
  EXPECT_LE(many.size() / 3, static_cast<size_t>(4 * per_epoch));
  // Shuffled: not in sentence order.
  bool sorted = true;
  for (size_t r = 3; r < one.size(); r += 3) sorted &= one[r] > one[r - 3];
  EXPECT_FALSE(sorted);
}

TEST(BertSampleMapping, ReportsSplitsWithoutUsableDocuments) {
  ScratchDir dir;
  const std::string prefix = dir / "corpus";
  CorpusShape shape;
  shape.docs = 10;
  shape.max_sentences = 1;  // one sentence each: nothing for the binary head
  write_corpus(prefix, shape, 9);
  BertDatasetConfig config;
  config.seq_length = 32;
  EXPECT_NE(error_of([&] { make_dataset(dir, prefix, 10, config); }).find("no document of the split"),
            std::string::npos);
  config.binary_head = false;
  EXPECT_GE(make_dataset(dir, prefix, 10, config)->size(), 10);
}

TEST(BertDataset, RejectsBadSettings) {
  ScratchDir dir;
  const std::string prefix = dir / "corpus";
  write_corpus(prefix, CorpusShape{}, 10);
  BertDatasetConfig config;
  config.seq_length = 4;
  EXPECT_NE(error_of([&] { make_dataset(dir, prefix, 10, config); }).find("--seq-length"), std::string::npos);
  config.seq_length = 32;
  config.mask_prob = 1.0;
  EXPECT_NE(error_of([&] { make_dataset(dir, prefix, 10, config); }).find("--mask-prob"), std::string::npos);
  config.mask_prob = 0.15;
  config.seed = 0;
  EXPECT_NE(error_of([&] { make_dataset(dir, prefix, 10, config); }).find("--seed"), std::string::npos);
  EXPECT_NE(error_of([] { make_masking_vocabulary(10, toy_token, 2, 3, 4, 10); }).find("[PAD]"), std::string::npos);
}

// Many samples of one dataset: segments, types, masks and labels agree with each other, whole
// words are masked together, the count stays within Megatron's bound, and the 80/10/10 rule and
// the sentence-order swap show their rates.
TEST(BertDataset, SamplesAreConsistent) {
  ScratchDir dir;
  const std::string prefix = dir / "corpus";
  CorpusShape shape;
  shape.docs = 300;
  shape.leading_piece_prob = 0.0;  // words then never continue across [SEP]
  write_corpus(prefix, shape, 12);
  BertDatasetConfig config;
  config.seq_length = 48;
  const auto ds = make_dataset(dir, prefix, 3000, config);
  const auto vocab = toy_vocab();
  int64_t masked = 0, as_mask = 0, kept = 0, replaced = 0, swapped = 0;
  for (int64_t i = 0; i < ds->size(); ++i) {
    const BertSample s = ds->get(i);
    const int64_t target = ds->sample_index()[3 * i + 2];
    // Layout: [CLS] A [SEP] B [SEP] pad...
    ASSERT_EQ(s.tokens[0], kCls);
    int64_t length = 0;
    while (length < config.seq_length && s.padding_mask[static_cast<size_t>(length)] == 1) ++length;
    std::vector<int64_t> seps;
    for (int64_t t = 0; t < length; ++t) {
      if (s.tokens[static_cast<size_t>(t)] == kSep && s.loss_mask[static_cast<size_t>(t)] == 0.0f) seps.push_back(t);
    }
    ASSERT_GE(seps.size(), 2u) << "sample " << i;
    ASSERT_EQ(seps.back(), length - 1);
    EXPECT_LE(length - 3, target);
    for (int64_t t = 0; t < config.seq_length; ++t) {
      const size_t u = static_cast<size_t>(t);
      const int32_t want_type = t <= seps.front() ? 0 : t < length ? 1 : kPad;
      ASSERT_EQ(s.types[u], want_type) << "sample " << i << " position " << t;
      if (t >= length) {
        ASSERT_EQ(s.tokens[u], kPad);
        ASSERT_EQ(s.padding_mask[u], kPad);
      }
      ASSERT_EQ(s.loss_mask[u] != 0.0f, s.labels[u] != -1);
    }
    // Reconstruct the original tokens and check the masking.
    std::vector<int32_t> original = s.tokens;
    int64_t count = 0;
    for (size_t t = 0; t < original.size(); ++t) {
      if (s.labels[t] == -1) continue;
      ++count;
      original[t] = s.labels[t];
      ASSERT_NE(original[t], kCls);
      ASSERT_NE(original[t], kSep);
      if (s.tokens[t] == kMask) {
        ++as_mask;
      } else if (s.tokens[t] == s.labels[t]) {
        ++kept;
      } else {
        ++replaced;
      }
    }
    masked += count;
    const double bound = std::min(config.mask_prob * static_cast<double>(target),
                                  std::max(1.0, std::nearbyint(static_cast<double>(length) * config.mask_prob)));
    EXPECT_LE(static_cast<double>(count), bound) << "sample " << i;
    // Whole words: a "##" piece is masked exactly when the token before it is, skipping [CLS] and
    // [SEP] (a segment truncated inside a word starts with a piece, which joins the word before).
    for (int64_t t = 1; t + 1 < length; ++t) {
      const size_t u = static_cast<size_t>(t);
      if (s.labels[u] == -1 && (original[u] == kCls || original[u] == kSep)) continue;
      if (!vocab->continues_word[static_cast<size_t>(original[u])]) continue;
      int64_t v = t - 1;
      while (v > 0 && s.labels[static_cast<size_t>(v)] == -1 &&
             (original[static_cast<size_t>(v)] == kSep || original[static_cast<size_t>(v)] == kCls))
        --v;
      if (v == 0) continue;  // the first word of A
      ASSERT_EQ(s.labels[u] != -1, s.labels[static_cast<size_t>(v)] != -1)
          << "sample " << i << " splits a word at " << t;
    }
    swapped += s.is_random;
  }
  ASSERT_GT(masked, 10000);
  const double n = static_cast<double>(masked);
  EXPECT_NEAR(as_mask / n, 0.8, 0.015);
  // A random replacement may draw the original id (1 in 100 here).
  EXPECT_NEAR(kept / n, 0.1 + 0.1 / kVocab, 0.01);
  EXPECT_NEAR(replaced / n, 0.1 - 0.1 / kVocab, 0.01);
  EXPECT_NEAR(static_cast<double>(swapped) / static_cast<double>(ds->size()), 0.5, 0.03);
}

// One long sequence under many seeds: positions sorted, labels the original ids, whole words,
// unmasked tokens untouched, and nearly all of the budget used.
TEST(BertMasking, WholeWordsWithinTheBudget) {
  const auto vocab = toy_vocab();
  // [CLS] then words of 1 to 3 tokens, then [SEP].
  std::vector<int32_t> tokens{kCls};
  std::mt19937 gen(4);
  while (tokens.size() < 200) {
    tokens.push_back(kFirstWord + static_cast<int32_t>(gen() % 50));
    for (uint32_t p = gen() % 3; p > 0; --p) tokens.push_back(kFirstPiece + static_cast<int32_t>(gen() % 40));
  }
  tokens.push_back(kSep);
  int64_t total = 0;
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    NumpyRandomState rng(seed);
    const MaskedLmPredictions m = create_masked_lm_predictions(tokens, 197, 0.15, *vocab, rng);
    ASSERT_EQ(m.positions.size(), m.labels.size());
    ASSERT_TRUE(std::is_sorted(m.positions.begin(), m.positions.end()));
    EXPECT_LE(static_cast<double>(m.positions.size()), std::round(tokens.size() * 0.15));
    for (size_t k = 0; k < m.positions.size(); ++k) {
      ASSERT_EQ(m.labels[k], tokens[static_cast<size_t>(m.positions[k])]);
      // Whole words: a word start's pieces are masked with it.
      const size_t p = static_cast<size_t>(m.positions[k]);
      if (!vocab->continues_word[static_cast<size_t>(tokens[p])] && p + 1 < tokens.size() &&
          vocab->continues_word[static_cast<size_t>(tokens[p + 1])]) {
        ASSERT_TRUE(k + 1 < m.positions.size() && m.positions[k + 1] == m.positions[k] + 1);
      }
    }
    for (size_t t = 0; t < tokens.size(); ++t) {
      const bool is_masked = std::binary_search(m.positions.begin(), m.positions.end(), static_cast<int32_t>(t));
      if (!is_masked) {
        ASSERT_EQ(m.tokens[t], tokens[t]);
      }
    }
    total += static_cast<int64_t>(m.positions.size());
  }
  // Nearly the whole budget is used (a span that does not fit shrinks to fewer words).
  EXPECT_GT(static_cast<double>(total) / 300.0, 0.9 * std::round(tokens.size() * 0.15));
}

// ---- the cache ----

TEST(BertDataset, CachesTheMappingLikeMegatron) {
  ScratchDir dir;
  const std::string prefix = dir / "corpus";
  write_corpus(prefix, CorpusShape{}, 13);
  BertDatasetConfig config;
  config.seq_length = 40;
  config.cache_dir = dir / "cache";
  const auto first = make_dataset(dir, prefix, 50, config);
  EXPECT_NE(first->cache_status().find("cached at"), std::string::npos) << first->cache_status();
  const std::string npy = first->cache_prefix() + "sample_index.npy";
  EXPECT_TRUE(fs::exists(npy));
  EXPECT_TRUE(fs::exists(first->cache_prefix() + "description.txt"));
  EXPECT_NE(fs::path(npy).filename().string().find("-BERTMaskedWordPieceDataset-sample_index.npy"), std::string::npos);

  const auto second = make_dataset(dir, prefix, 50, config);
  EXPECT_NE(second->cache_status().find("loaded from cache"), std::string::npos) << second->cache_status();
  ASSERT_EQ(second->size(), first->size());
  for (int64_t i = 0; i < first->sample_index().size(); ++i)
    ASSERT_EQ(second->sample_index()[i], first->sample_index()[i]);
  EXPECT_EQ(second->get(3).tokens, first->get(3).tokens);

  // Another setting that keys the description misses the cache.
  BertDatasetConfig other = config;
  other.short_seq_prob = 0.2;
  EXPECT_NE(make_dataset(dir, prefix, 50, other)->cache_prefix(), first->cache_prefix());

  // A damaged cache is rebuilt, not trusted.
  std::vector<uint32_t> bad(static_cast<size_t>(first->sample_index().size()), 0);
  NpyArray::from_vector(bad, first->sample_index().shape()).save(npy);
  const auto third = make_dataset(dir, prefix, 50, config);
  EXPECT_NE(third->cache_status().find("cache invalid"), std::string::npos) << third->cache_status();
  for (int64_t i = 0; i < first->sample_index().size(); ++i)
    ASSERT_EQ(third->sample_index()[i], first->sample_index()[i]);
}

}  // namespace
}  // namespace tessera::data
