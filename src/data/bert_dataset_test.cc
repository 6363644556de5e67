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

#include "data/gpt_dataset_testing.h"

namespace tessera::data {
namespace {

namespace fs = std::filesystem;
using testing::read_file_bytes;
using testing::read_i64;
using testing::ScratchDir;
using testing::shell_quote;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Runs testdata/bert_reference.py <args> --out `out_dir`; "" on success, else why not.
std::string run_bert_reference(const std::string& args, const std::string& out_dir) {
  static const bool has_numpy = std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0;
  if (!has_numpy) return "these tests need /usr/bin/python3 with NumPy (Debian's python3-numpy)";
  const fs::path script = fs::path(__FILE__).parent_path() / "testdata" / "bert_reference.py";
  const std::string log = (fs::path(out_dir) / "reference.log").string();
  const std::string cmd = str_cat("/usr/bin/python3 ", shell_quote(script.string()), " ", args, " --out ",
                                  shell_quote(out_dir), " >", shell_quote(log), " 2>&1");
  if (std::system(cmd.c_str()) != 0) return str_cat("failed: ", cmd, "\n", read_file_bytes(log));
  return "";
}

// ---- a toy WordPiece vocabulary ----

// 0 [PAD], 1 [UNK], 2 [CLS], 3 [SEP], 4 [MASK], word starts 5..59, "##" pieces 60..99.
constexpr int32_t kPad = 0, kCls = 2, kSep = 3, kMask = 4, kVocab = 100;
constexpr int32_t kFirstWord = 5, kFirstPiece = 60;

std::string toy_token(int32_t id) {
  static const char* special[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  if (id < kFirstWord) return special[id];
  if (id < kFirstPiece) return str_cat("w", id);
  return str_cat("##p", id);
}

void write_vocab(const std::string& path) {
  std::ofstream out(path);
  for (int32_t id = 0; id < kVocab; ++id) out << toy_token(id) << "\n";
}

std::shared_ptr<const MaskingVocabulary> toy_vocab() {
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
void write_corpus(const std::string& prefix, const CorpusShape& shape, uint32_t seed) {
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

// ---- comparison with the Python transcription of Megatron ----

struct Observed {
  int64_t rows = 0, short_rows = 0, truncated = 0, random_order = 0, in_order = 0, masked = 0;
};

void expect_mapping(const BertDataset& ds, const std::vector<int64_t>& expected, const std::string& what,
                    Observed& seen) {
  const NpyArray& m = ds.sample_index();
  EXPECT_EQ(m.type(), NpyArray::Type::kUInt32) << what;
  ASSERT_EQ(m.size(), static_cast<int64_t>(expected.size())) << what;
  for (int64_t i = 0; i < m.size(); ++i) ASSERT_EQ(m[i], expected[i]) << what << " mapping entry " << i;
  for (int64_t r = 0; r < ds.size(); ++r) {
    ++seen.rows;
    if (m[3 * r + 2] < ds.seq_length() - 3) ++seen.short_rows;
  }
}

void expect_samples(const MaskedLmDataset& ds, const std::vector<int64_t>& expected, const std::string& what,
                    Observed& seen) {
  const size_t l = static_cast<size_t>(ds.seq_length());
  const size_t width = 5 * l + 2;
  ASSERT_EQ(expected.size(), static_cast<size_t>(ds.size()) * width) << what;
  for (int64_t s = 0; s < ds.size(); ++s) {
    const BertSample x = ds.get(s);
    ASSERT_EQ(x.tokens.size(), l);
    ASSERT_EQ(x.types.size(), l);
    ASSERT_EQ(x.labels.size(), l);
    ASSERT_EQ(x.loss_mask.size(), l);
    ASSERT_EQ(x.padding_mask.size(), l);
    const int64_t* e = expected.data() + s * width;
    for (size_t t = 0; t < l; ++t) {
      ASSERT_EQ(x.tokens[t], e[t]) << what << " sample " << s << " text " << t;
      ASSERT_EQ(x.types[t], e[l + t]) << what << " sample " << s << " types " << t;
      ASSERT_EQ(x.labels[t], e[2 * l + t]) << what << " sample " << s << " labels " << t;
      ASSERT_EQ(x.loss_mask[t], static_cast<float>(e[3 * l + t])) << what << " sample " << s << " loss_mask " << t;
      ASSERT_EQ(x.padding_mask[t], e[4 * l + t]) << what << " sample " << s << " padding_mask " << t;
      seen.masked += x.loss_mask[t] != 0.0f;
    }
    ASSERT_EQ(x.is_random, e[5 * l]) << what << " sample " << s;
    ASSERT_EQ(x.truncated ? 1 : 0, e[5 * l + 1]) << what << " sample " << s;
    (x.is_random ? seen.random_order : seen.in_order) += 1;
    seen.truncated += x.truncated;
  }
}

struct Case {
  std::vector<std::string> data_path;
  std::string split = "8,1,1";
  int64_t seq_length = 64;
  uint32_t seed = 1234;
  std::array<int64_t, 3> sizes{200, 30, 10};
  double mask_prob = 0.15;
  double short_seq_prob = 0.1;
  bool binary_head = true;
};

Observed compare_with_reference(const Case& c, const ScratchDir& dir) {
  Observed seen;
  BertDataConfig config;
  config.data_path = c.data_path;
  config.split = c.split;
  config.seq_length = c.seq_length;
  config.seed = c.seed;
  config.cache_path = dir / "cache";
  config.mask_prob = c.mask_prob;
  config.short_seq_prob = c.short_seq_prob;
  config.binary_head = c.binary_head;
  const auto datasets = build_bert_datasets(config, c.sizes, toy_vocab());

  const std::string out = dir / "reference";
  fs::create_directories(out);
  write_vocab(dir / "vocab.txt");
  std::string args = "bert --data-path";
  for (const std::string& p : c.data_path) args += " " + shell_quote(p);
  args += str_cat(" --split ", shell_quote(c.split), " --seq-length ", c.seq_length, " --seed ", c.seed, " --sizes ",
                  c.sizes[0], ",", c.sizes[1], ",", c.sizes[2], " --mask-prob ", c.mask_prob, " --short-seq-prob ",
                  c.short_seq_prob, " --binary-head ", c.binary_head ? 1 : 0, " --vocab ",
                  shell_quote(dir / "vocab.txt"), " --cls ", kCls, " --sep ", kSep, " --mask ", kMask, " --pad ", kPad);
  const std::string err = run_bert_reference(args, out);
  EXPECT_EQ(err, "");
  if (!err.empty()) return seen;
  const nlohmann::json summary = nlohmann::json::parse(read_file_bytes(out + "/summary.json"));

  for (int i = 0; i < 3; ++i) {
    const std::string name = split_name(static_cast<Split>(i));
    const nlohmann::json& ref = summary["splits"][i];
    if (ref.is_null()) {
      EXPECT_EQ(datasets[i], nullptr) << name;
      continue;
    }
    if (datasets[i] == nullptr) {
      ADD_FAILURE() << name << " missing";
      continue;
    }
    EXPECT_EQ(datasets[i]->size(), ref["size"].get<int64_t>()) << name;
    if (ref["kind"] == "blended") {
      const auto* blended = dynamic_cast<const BlendedMaskedLmDataset*>(datasets[i].get());
      if (blended == nullptr) {
        ADD_FAILURE() << name << " should be blended";
        continue;
      }
      EXPECT_EQ(blended->weights(), ref["weights"].get<std::vector<double>>()) << name;
      const auto& idx = blended->indices();
      EXPECT_EQ(std::vector<int64_t>(idx.dataset_index.begin(), idx.dataset_index.end()),
                read_i64(out + "/" + name + "-dataset_index.i64"))
          << name;
      EXPECT_EQ(idx.dataset_sample_index, read_i64(out + "/" + name + "-dataset_sample_index.i64")) << name;
      for (size_t p = 0; p < blended->datasets().size(); ++p) {
        const auto* part = dynamic_cast<const BertDataset*>(blended->datasets()[p].get());
        if (part == nullptr) {
          ADD_FAILURE() << name << " part " << p << " should be a BertDataset";
          continue;
        }
        expect_mapping(*part, read_i64(str_cat(out, "/", name, "-", p, "-mapping.i64")), str_cat(name, "-", p), seen);
      }
    } else {
      const auto* bert = dynamic_cast<const BertDataset*>(datasets[i].get());
      if (bert == nullptr) {
        ADD_FAILURE() << name << " should be a BertDataset";
        continue;
      }
      EXPECT_EQ(bert->documents().first, ref["documents"][0].get<int64_t>()) << name;
      EXPECT_EQ(bert->documents().second, ref["documents"][1].get<int64_t>()) << name;
      expect_mapping(*bert, read_i64(out + "/" + name + "-mapping.i64"), name, seen);
    }
    expect_samples(*datasets[i], read_i64(out + "/" + name + "-samples.i64"), name, seen);
  }
  return seen;
}

// The Python port's engines against the C++ standard library's, which build_mapping uses.
TEST(BertReference, PythonEnginesMatchTheStandardLibrary) {
  for (uint32_t seed : {1u, 1234u, 1235u, 2147483647u}) {
    ScratchDir dir;
    const int count = 1500;
    ASSERT_EQ(run_bert_reference(str_cat("mt --seed ", seed, " --count ", count), dir.path()), "");
    const std::vector<int64_t> e32 = read_i64(dir / "mt19937.i64");
    const std::vector<int64_t> e64 = read_i64(dir / "mt19937_64.i64");
    ASSERT_EQ(e32.size(), static_cast<size_t>(count));
    ASSERT_EQ(e64.size(), static_cast<size_t>(count));
    std::mt19937 g32(seed);
    std::mt19937_64 g64(seed);
    for (int i = 0; i < count; ++i) {
      ASSERT_EQ(static_cast<int64_t>(g32()), e32[i]) << "seed " << seed << " output " << i;
      ASSERT_EQ(static_cast<uint64_t>(e64[i]), g64()) << "seed " << seed << " output " << i;
    }
  }
}

// RandomState.random() and randint(), which the samples draw from, against NumPy's.
TEST(BertReference, RandomAndRandintMatchNumpy) {
  for (uint32_t seed : {1u, 1234u, 4294967295u}) {
    ScratchDir dir;
    const int count = 400;
    ASSERT_EQ(run_bert_reference(str_cat("draws --seed ", seed, " --count ", count), dir.path()), "");
    const std::vector<int64_t> expected = read_i64(dir / "draws.i64");
    ASSERT_EQ(expected.size(), static_cast<size_t>(count * 11));
    NumpyRandomState rng(seed);
    size_t at = 0;
    for (int i = 0; i < count; ++i) {
      const double u = rng.random_sample();
      int64_t bits;
      std::memcpy(&bits, &u, sizeof(bits));
      ASSERT_EQ(bits, expected[at++]) << "seed " << seed << " round " << i;
      for (int64_t n : {int64_t{2}, int64_t{3}, int64_t{100}, int64_t{70000}, int64_t{1} << 33}) {
        ASSERT_EQ(rng.randint(0, n), expected[at++]) << "seed " << seed << " round " << i << " n " << n;
        ASSERT_EQ(rng.randint(1, n), expected[at++]) << "seed " << seed << " round " << i << " n " << n;
      }
    }
  }
}

TEST(BertDataset, BinaryHeadMatchesMegatron) {
  ScratchDir dir;
  const std::string prefix = dir / "corpus";
  CorpusShape shape;
  shape.long_sentence_prob = 0.03;  // some documents skipped for a long sentence
  write_corpus(prefix, shape, 7);
  Case c;
  c.data_path = {prefix};
  const Observed seen = compare_with_reference(c, dir);
  EXPECT_GT(seen.short_rows, 0) << "no short-sequence rows were exercised";
  EXPECT_GT(seen.truncated, 0);
  EXPECT_GT(seen.random_order, 0);
  EXPECT_GT(seen.in_order, 0);
  EXPECT_GT(seen.masked, 0);
}

// Without the binary head: one segment, documents of one sentence kept, heavy truncation (target 29
// of sentences up to 40 tokens, a few of over 512 in one-sentence documents), ratio 3.
TEST(BertDataset, NoBinaryHeadMatchesMegatron) {
  ScratchDir dir;
  const std::string prefix = dir / "corpus";
  CorpusShape shape;
  shape.docs = 80;
  shape.max_sentences = 3;
  shape.max_length = 40;
  shape.long_sentence_prob = 0.05;
  write_corpus(prefix, shape, 11);
  Case c;
  c.data_path = {prefix};
  c.seq_length = 32;
  c.short_seq_prob = 0.3;
  c.binary_head = false;
  c.sizes = {250, 20, 5};
  c.seed = 99;
  const Observed seen = compare_with_reference(c, dir);
  EXPECT_GT(seen.short_rows, 0);
  EXPECT_GT(seen.truncated, 0);
  EXPECT_EQ(seen.random_order, 0);
}

// No short sequences (no draws from the 32-bit engine), a higher masking probability, one-epoch
// valid and test splits (sizes 0 give empty datasets), a large seed.
TEST(BertDataset, NoShortSequencesMatchesMegatron) {
  ScratchDir dir;
  const std::string prefix = dir / "corpus";
  CorpusShape shape;
  shape.docs = 40;
  shape.min_sentences = 2;
  write_corpus(prefix, shape, 3);
  Case c;
  c.data_path = {prefix};
  c.short_seq_prob = 0.0;
  c.mask_prob = 0.3;
  c.seed = 2000000000u;
  c.sizes = {120, 0, 7};
  c.split = "6,2,2";
  const Observed seen = compare_with_reference(c, dir);
  EXPECT_EQ(seen.short_rows, 0);
  EXPECT_GT(seen.masked, 0);
}

TEST(BertDataset, WeightedBlendMatchesMegatron) {
  ScratchDir dir;
  CorpusShape shape;
  shape.docs = 30;
  write_corpus(dir / "a", shape, 21);
  shape.max_sentences = 4;
  write_corpus(dir / "b", shape, 22);
  Case c;
  c.data_path = {"0.7", dir / "a", "0.3", dir / "b"};
  c.sizes = {100, 10, 10};
  c.seq_length = 48;
  compare_with_reference(c, dir);
}

TEST(BertDataset, UnweightedListIsOneEpochOfEach) {
  ScratchDir dir;
  CorpusShape shape;
  shape.docs = 20;
  write_corpus(dir / "a", shape, 31);
  write_corpus(dir / "b", shape, 32);
  Case c;
  c.data_path = {dir / "a", dir / "b"};
  c.sizes = {1000, 10, 10};
  c.split = "1,1,0";
  c.seq_length = 40;
  compare_with_reference(c, dir);
}

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
