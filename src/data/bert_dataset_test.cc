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
using testing::shell_quote;
using namespace bert_testing;

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

}  // namespace
}  // namespace tessera::data
