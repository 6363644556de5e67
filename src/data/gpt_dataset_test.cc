#include "data/gpt_dataset.h"

#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "data/blended_dataset.h"
#include "data/gpt_dataset_testing.h"
#include "core/testing.h"

namespace tessera::data {
namespace {

namespace fs = std::filesystem;
using testing::read_file_bytes;
using testing::read_i64;
using testing::run_reference;
using testing::ScratchDir;
using testing::shell_quote;

using ::tessera::testing::error_of;

// ---- test corpora ----

struct Lcg {
  uint64_t x;
  uint32_t next() {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<uint32_t>(x >> 33);
  }
  int uniform(int lo, int hi) { return lo + static_cast<int>(next() % static_cast<uint32_t>(hi - lo + 1)); }
};

using LengthFn = std::function<int(Lcg&)>;

// `docs` documents, each of `sequences_per_doc` sequences with lengths drawn from `length`.
void write_corpus(const std::string& prefix, int docs, const LengthFn& length, uint64_t seed,
                  TokenDType dtype = TokenDType::kUInt16, int sequences_per_doc = 1) {
  Lcg rng{seed};
  IndexedDatasetBuilder b(prefix, dtype);
  for (int d = 0; d < docs; ++d) {
    for (int s = 0; s < sequences_per_doc; ++s) {
      std::vector<int32_t> seq(static_cast<size_t>(length(rng)));
      for (int32_t& t : seq) t = static_cast<int32_t>(rng.next() % 50000);
      b.add_item(seq);
    }
    b.end_document();
  }
  b.finalize();
}

const LengthFn kUniform = [](Lcg& r) { return r.uniform(1, 80); };
// Mostly tiny documents (some empty) and a few longer than several samples.
const LengthFn kTinyAndLong = [](Lcg& r) { return r.uniform(0, 9) < 7 ? r.uniform(0, 3) : r.uniform(40, 400); };
const LengthFn kShort = [](Lcg& r) { return r.uniform(2, 12); };

// Tokens per epoch of a split of one dataset, to choose sample counts around epoch boundaries.
int64_t split_tokens(const std::string& prefix, const std::string& split, Split which) {
  IndexedDataset ds(prefix);
  auto range = *split_document_ranges(split_matrix(parse_split(split)), ds.num_sequences())[static_cast<int>(which)];
  int64_t t = 0;
  for (int64_t d = range.first; d < range.second; ++d) t += ds.sequence_length(d);
  return t;
}

// ---- comparison with the Python transcription of Megatron ----

const char* numpy_name(NpyArray::Type t) {
  switch (t) {
    case NpyArray::Type::kInt16: return "int16";
    case NpyArray::Type::kInt32: return "int32";
    case NpyArray::Type::kUInt32: return "uint32";
    case NpyArray::Type::kInt64: return "int64";
  }
  return "?";
}

void expect_array(const NpyArray& ours, const std::string& file, const std::string& what) {
  const std::vector<int64_t> expected = read_i64(file);
  ASSERT_EQ(ours.size(), static_cast<int64_t>(expected.size())) << what;
  for (int64_t i = 0; i < ours.size(); ++i) ASSERT_EQ(ours[i], expected[i]) << what << " entry " << i;
}

struct Observed {
  int separate_final_epochs = 0;
  int multi_epoch_joined = 0;
};

void expect_gpt(const TokenDataset* dataset, const nlohmann::json& ref, const std::string& out, const std::string& stem,
                Observed& seen) {
  const auto* gpt = dynamic_cast<const GptDataset*>(dataset);
  ASSERT_NE(gpt, nullptr) << stem << " should be a GPTDataset";
  EXPECT_EQ(gpt->size(), ref["size"].get<int64_t>()) << stem;
  EXPECT_EQ(gpt->epoch_plan().num_epochs, ref["num_epochs"].get<int64_t>()) << stem;
  EXPECT_EQ(gpt->epoch_plan().separate_final_epoch, ref["separate_final_epoch"].get<bool>()) << stem;
  EXPECT_EQ(gpt->documents().first, ref["documents"][0].get<int64_t>()) << stem;
  EXPECT_EQ(gpt->documents().second, ref["documents"][1].get<int64_t>()) << stem;
  EXPECT_EQ(numpy_name(gpt->sample_index().type()), ref["sample_index_dtype"].get<std::string>()) << stem;
  EXPECT_EQ(numpy_name(gpt->shuffle_index().type()), ref["shuffle_index_dtype"].get<std::string>()) << stem;
  EXPECT_EQ(gpt->document_index().type(), NpyArray::Type::kInt32) << stem;
  expect_array(gpt->document_index(), str_cat(out, "/", stem, "-document_index.i64"), stem + " document index");
  expect_array(gpt->sample_index(), str_cat(out, "/", stem, "-sample_index.i64"), stem + " sample index");
  expect_array(gpt->shuffle_index(), str_cat(out, "/", stem, "-shuffle_index.i64"), stem + " shuffle index");
  if (gpt->epoch_plan().separate_final_epoch) ++seen.separate_final_epochs;
  if (gpt->epoch_plan().num_epochs > 1 && !gpt->epoch_plan().separate_final_epoch) ++seen.multi_epoch_joined;
}

// Every token of every sample.
void expect_samples(const TokenDataset& ds, const std::vector<int64_t>& expected, const std::string& name) {
  const size_t width = static_cast<size_t>(ds.seq_length() + 1);
  ASSERT_EQ(expected.size(), static_cast<size_t>(ds.size()) * width) << name;
  std::vector<int32_t> sample(width);
  for (int64_t s = 0; s < ds.size(); ++s) {
    ds.get(s, sample);
    for (size_t t = 0; t < width; ++t)
      ASSERT_EQ(sample[t], expected[s * width + t]) << name << " sample " << s << " token " << t;
  }
}

// Builds the datasets in C++ and in the Python reference and compares every index and every
// token of every sample.
Observed compare_with_reference(const std::vector<std::string>& data_path, const std::string& split, int64_t seq_length,
                                uint32_t seed, std::array<int64_t, 3> sizes, const ScratchDir& dir) {
  Observed seen;
  GptDataConfig config;
  config.data_path = data_path;
  config.split = split;
  config.seq_length = seq_length;
  config.seed = seed;
  config.cache_path = dir / "cache";
  const auto datasets = build_gpt_datasets(config, sizes);

  const std::string out = dir / "reference";
  fs::create_directories(out);
  std::string args = "gpt --data-path";
  for (const std::string& p : data_path) args += " " + shell_quote(p);
  args += str_cat(" --split ", shell_quote(split), " --seq-length ", seq_length, " --seed ", seed, " --sizes ", sizes[0],
                  ",", sizes[1], ",", sizes[2]);
  const std::string err = run_reference(args, out);
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
    const TokenDataset* ds = datasets[i].get();
    if (ref["kind"] == "blended") {
      const auto* blended = dynamic_cast<const BlendedDataset*>(ds);
      if (blended == nullptr) {
        ADD_FAILURE() << name << " should be blended";
        continue;
      }
      EXPECT_EQ(blended->size(), ref["size"].get<int64_t>()) << name;
      EXPECT_EQ(blended->weights(), ref["weights"].get<std::vector<double>>()) << name;
      const auto& idx = blended->indices();
      EXPECT_EQ(std::vector<int64_t>(idx.dataset_index.begin(), idx.dataset_index.end()),
                read_i64(out + "/" + name + "-dataset_index.i64"))
          << name;
      EXPECT_EQ(idx.dataset_sample_index, read_i64(out + "/" + name + "-dataset_sample_index.i64")) << name;
      for (size_t p = 0; p < blended->datasets().size(); ++p)
        expect_gpt(blended->datasets()[p].get(), ref["parts"][p], out, str_cat(name, "-", p), seen);
    } else {
      expect_gpt(ds, ref, out, name, seen);
    }
    expect_samples(*ds, read_i64(out + "/" + name + "-samples.i64"), name);
  }
  return seen;
}

// ---- --split ----

TEST(GptSplit, ParsesAndNormalisesAsMegatron) {
  auto w = parse_split("949,50,1");
  EXPECT_DOUBLE_EQ(w[0], 0.949);
  EXPECT_DOUBLE_EQ(w[2], 0.001);
  EXPECT_EQ(parse_split("969, 30, 1"), parse_split("969,30,1"));
  EXPECT_EQ(parse_split("98/2"), (std::array<double, 3>{0.98, 0.02, 0.0}));
  EXPECT_EQ(parse_split("1"), (std::array<double, 3>{1.0, 0.0, 0.0}));
  // NumPy sums left to right below 8 elements: (0.1 + 0.2) + 0.3 = 0.6000000000000001.
  EXPECT_EQ(parse_split("0.1,0.2,0.3")[2], 0.3 / ((0.1 + 0.2) + 0.3));

  const SplitMatrix m = split_matrix(parse_split("1,0,1"));
  ASSERT_TRUE(m[0] && !m[1] && m[2]);
  EXPECT_EQ(*m[0], (std::pair<double, double>{0.0, 0.5}));
  EXPECT_EQ(*m[2], (std::pair<double, double>{0.5, 1.0}));
  // Python's round is half to even: 0.5 * 5 = 2.5 rounds to 2.
  const auto r = split_document_ranges(m, 5);
  EXPECT_EQ(*r[0], (DocumentRange{0, 2}));
  EXPECT_EQ(*r[2], (DocumentRange{2, 5}));
}

TEST(GptSplit, MalformedStringsNameTheFlag) {
  for (const char* bad : {"", "  ", "a,b", "1,2,3,4", "0,0,0", "-1,2", "1e3", "1..2", "1,,2", "50%,50%"}) {
    const std::string e = error_of([&] { parse_split(bad); });
    EXPECT_NE(e.find(str_cat("--split '", bad, "'")), std::string::npos) << bad << ": " << e;
  }
}

TEST(GptSplit, NumpySumIsPairwise) {
  // 9 values: NumPy's 8-accumulator path, not a left-to-right loop.
  std::vector<double> v = {0.1, 0.7, 0.3, 1e-17, 0.9, 0.2, 1e16, 0.4, 0.6};
  double r[8];
  for (int j = 0; j < 8; ++j) r[j] = v[j];
  const double expected = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7])) + v[8];
  EXPECT_EQ(numpy_sum(v), expected);
}

// ---- the algorithm's pieces ----

TEST(GptIndices, EpochsAndTheSeparateFinalEpochRule) {
  // 1000 tokens per epoch, 10-token samples: 99 samples per epoch ((1000 - 1) / 10).
  EXPECT_EQ(gpt_num_epochs(1000, std::nullopt, 10), 1);
  EXPECT_EQ(gpt_num_epochs(1000, 99, 10), 1);    // 991 tokens
  EXPECT_EQ(gpt_num_epochs(1000, 100, 10), 2);   // 1001 tokens
  EXPECT_EQ(gpt_num_epochs(1000, 0, 10), 1);
  auto plan = gpt_epoch_plan(1000, 210, 10);  // 3 epochs; 199 before the last, 11 from it
  EXPECT_EQ(plan.num_epochs, 3);
  EXPECT_EQ(plan.num_samples_sans_final_epoch, 199);
  EXPECT_TRUE(plan.separate_final_epoch);  // 11 < int(0.8 * 99) = 79
  plan = gpt_epoch_plan(1000, 199 + 79, 10);
  EXPECT_FALSE(plan.separate_final_epoch);  // 79 is not below 79
  plan = gpt_epoch_plan(1000, 199 + 78, 10);
  EXPECT_TRUE(plan.separate_final_epoch);
}

TEST(GptIndices, SampleIndexSpansDocumentsAndSharesOneToken) {
  // Documents of 5, 3 and 4 tokens in that order; samples of 4 + 1 tokens.
  const std::vector<int32_t> sizes = {5, 3, 4};
  const std::vector<int32_t> doc_index = {0, 1, 2};
  const auto idx = build_sample_index(sizes, doc_index, 4, 1, 12);
  // (12 - 1) / 4 = 2 samples: tokens [0, 5) of the stream and [4, 9).
  EXPECT_EQ(idx, (std::vector<int64_t>{0, 0, 0, 4, 2, 0}));
}

// ---- against the Python transcription of Megatron ----

TEST(GptDataset, MatchesMegatronSingleDataset) {
  ScratchDir dir;
  const std::string a = dir / "a";
  write_corpus(a, 1000, kUniform, 1);
  Observed total;
  {
    // Train ends a quarter into its third epoch: the final epoch is shuffled separately.
    const std::string split = "949,50,1";
    const int64_t per_epoch = (split_tokens(a, split, Split::kTrain) - 1) / 32;
    auto seen = compare_with_reference({a}, split, 32, 1234, {2 * per_epoch + per_epoch / 4, 40, 5}, dir);
    total.separate_final_epochs += seen.separate_final_epochs;
    total.multi_epoch_joined += seen.multi_epoch_joined;
  }
  {
    ScratchDir dir2;
    // Train ends 90% into its second epoch: one shuffle over both.
    const std::string split = "969, 30, 1";
    const int64_t per_epoch = (split_tokens(a, split, Split::kTrain) - 1) / 16;
    auto seen = compare_with_reference({a}, split, 16, 7, {per_epoch + per_epoch * 9 / 10, 300, 17}, dir2);
    total.separate_final_epochs += seen.separate_final_epochs;
    total.multi_epoch_joined += seen.multi_epoch_joined;
  }
  EXPECT_GT(total.separate_final_epochs, 0);
  EXPECT_GT(total.multi_epoch_joined, 0);
}

TEST(GptDataset, MatchesMegatronWithTinyEmptyAndLongDocuments) {
  ScratchDir dir;
  write_corpus(dir / "t", 600, kTinyAndLong, 2, TokenDType::kInt32);
  compare_with_reference({dir / "t"}, "98,2", 17, 0, {5000, 100, 0}, dir);
}

TEST(GptDataset, MatchesMegatronWithSeveralSequencesPerDocument) {
  ScratchDir dir;
  write_corpus(dir / "m", 150, kShort, 3, TokenDType::kUInt16, 3);
  compare_with_reference({dir / "m"}, "0.1, 0.2, 0.3", 24, 4294967295u, {300, 300, 300}, dir);
}

TEST(GptDataset, MatchesMegatronWeightedBlend) {
  ScratchDir dir;
  write_corpus(dir / "a", 300, kUniform, 11);
  write_corpus(dir / "b", 500, kTinyAndLong, 12);
  write_corpus(dir / "c", 200, kShort, 13);
  compare_with_reference({"0.3", dir / "a", "0.5", dir / "b", "0.2", dir / "c"}, "90,8,2", 20, 99, {3000, 200, 40},
                         dir);
}

TEST(GptDataset, MatchesMegatronUnweightedBlend) {
  ScratchDir dir;
  write_corpus(dir / "a", 300, kUniform, 21);
  write_corpus(dir / "b", 250, kShort, 22);
  // The valid request exceeds one epoch of both: capped at their total.
  compare_with_reference({dir / "a", dir / "b"}, "90,8,2", 20, 5, {1000, 10000, 5}, dir);
}

TEST(GptDataset, MatchesMegatronNineWayBlendAndSingleWeightedPath) {
  ScratchDir dir;
  std::vector<std::string> path;
  for (int i = 0; i < 9; ++i) {
    write_corpus(dir / str_cat("p", i), 60 + 10 * i, i % 2 ? kShort : kUniform, 100 + i);
    path.push_back(str_cat(0.05 + 0.1 * i));
    path.push_back(dir / str_cat("p", i));
  }
  compare_with_reference(path, "80,10,10", 8, 3, {2000, 100, 100}, dir);
  ScratchDir dir2;
  compare_with_reference({"2", dir / "p8"}, "90,8,2", 32, 1234, {500, 50, 5}, dir2);
}

// ---- caching ----

GptDatasetConfig small_config(const std::string& cache_dir) {
  GptDatasetConfig c;
  c.seq_length = 16;
  c.seed = 42;
  c.split = "1";
  c.cache_dir = cache_dir;
  return c;
}

std::vector<int32_t> all_tokens(const TokenDataset& d) {
  std::vector<int32_t> out;
  for (int64_t i = 0; i < d.size(); ++i) {
    auto s = d.get(i);
    out.insert(out.end(), s.begin(), s.end());
  }
  return out;
}

TEST(GptDatasetCache, SecondBuildLoadsTheCacheAndNumpyReadsIt) {
  ScratchDir dir;
  write_corpus(dir / "a", 100, kUniform, 5);
  auto ds = std::make_shared<const IndexedDataset>(dir / "a");
  GptDataset built(ds, Split::kTrain, {0, 100}, 1000, small_config(dir / "cache"));
  EXPECT_EQ(built.cache_status().rfind("built (no cache) and cached at ", 0), 0u) << built.cache_status();
  GptDataset loaded(ds, Split::kTrain, {0, 100}, 1000, small_config(dir / "cache"));
  EXPECT_EQ(loaded.cache_status().rfind("loaded from cache", 0), 0u) << loaded.cache_status();
  EXPECT_EQ(all_tokens(built), all_tokens(loaded));
  // Megatron's file names, and files numpy.save would write byte for byte.
  for (const char* name : {"document_index.npy", "sample_index.npy", "shuffle_index.npy"}) {
    const std::string path = built.cache_prefix() + name;
    ASSERT_TRUE(fs::exists(path)) << path;
    ScratchDir out;
    ASSERT_EQ(run_reference("npy --input " + shell_quote(path), out.path()), "");
    EXPECT_EQ(read_file_bytes(out / "resaved.npy"), read_file_bytes(path)) << name;
  }
  EXPECT_NE(built.cache_prefix().find("-GPTDataset-train-"), std::string::npos);
  EXPECT_EQ(read_file_bytes(built.cache_prefix() + "description.txt"), built.description());
}

TEST(GptDatasetCache, DefaultLocationIsMegatrons) {
  ScratchDir dir;
  write_corpus(dir / "a", 50, kUniform, 6);
  GptDataset d(std::make_shared<const IndexedDataset>(dir / "a"), Split::kTrain, {0, 50}, 10, small_config(""));
  EXPECT_EQ(fs::path(d.cache_prefix()).parent_path(), fs::path(dir / "a") / "cache" / "GPTDataset_indices");
}

TEST(GptDatasetCache, DifferentDescriptionsUseDifferentFiles) {
  ScratchDir dir;
  write_corpus(dir / "a", 50, kUniform, 7);
  auto ds = std::make_shared<const IndexedDataset>(dir / "a");
  GptDatasetConfig other = small_config(dir / "cache");
  other.seed = 43;
  GptDataset a(ds, Split::kTrain, {0, 50}, 100, small_config(dir / "cache"));
  GptDataset b(ds, Split::kTrain, {0, 50}, 100, other);
  GptDataset c(ds, Split::kTrain, {0, 50}, 101, small_config(dir / "cache"));
  EXPECT_NE(a.cache_prefix(), b.cache_prefix());
  EXPECT_NE(a.cache_prefix(), c.cache_prefix());
  EXPECT_NE(all_tokens(a), all_tokens(b));
}

TEST(GptDatasetCache, DamagedCacheIsRebuilt) {
  ScratchDir dir;
  write_corpus(dir / "a", 100, kUniform, 8);
  auto ds = std::make_shared<const IndexedDataset>(dir / "a");
  GptDataset first(ds, Split::kTrain, {0, 100}, 500, small_config(dir / "cache"));
  const std::vector<int32_t> expected = all_tokens(first);
  const std::string shuffle = first.cache_prefix() + "shuffle_index.npy";
  const std::string sample = first.cache_prefix() + "sample_index.npy";
  const std::string original_shuffle = read_file_bytes(shuffle);
  const std::string original_sample = read_file_bytes(sample);

  // Truncated file.
  testing::write_file_bytes(shuffle, original_shuffle.substr(0, original_shuffle.size() - 4));
  GptDataset truncated(ds, Split::kTrain, {0, 100}, 500, small_config(dir / "cache"));
  EXPECT_NE(truncated.cache_status().find("cache invalid"), std::string::npos) << truncated.cache_status();
  EXPECT_EQ(all_tokens(truncated), expected);
  EXPECT_EQ(read_file_bytes(shuffle), original_shuffle);  // rewritten

  // A duplicated shuffle entry (no longer a permutation).
  std::string dup = original_shuffle;
  std::memcpy(dup.data() + dup.size() - 4, dup.data() + dup.size() - 8, 4);
  testing::write_file_bytes(shuffle, dup);
  GptDataset duplicated(ds, Split::kTrain, {0, 100}, 500, small_config(dir / "cache"));
  EXPECT_NE(duplicated.cache_status().find("not a permutation"), std::string::npos) << duplicated.cache_status();

  // An offset beyond its document.
  std::string far = original_sample;
  const int32_t huge = 1 << 30;
  std::memcpy(far.data() + far.size() - 4, &huge, 4);
  testing::write_file_bytes(sample, far);
  GptDataset offset(ds, Split::kTrain, {0, 100}, 500, small_config(dir / "cache"));
  EXPECT_NE(offset.cache_status().find("outside its document"), std::string::npos) << offset.cache_status();
  EXPECT_EQ(all_tokens(offset), expected);
}

TEST(GptDatasetCache, UnwritableCacheIsNotFatal) {
  ScratchDir dir;
  write_corpus(dir / "a", 30, kUniform, 9);
  testing::write_file_bytes(dir / "blocker", "x");  // a file where the directory should go
  GptDataset d(std::make_shared<const IndexedDataset>(dir / "a"), Split::kTrain, {0, 30}, 20,
               small_config(dir / "blocker/cache"));
  EXPECT_NE(d.cache_status().find("not cached"), std::string::npos) << d.cache_status();
  EXPECT_EQ(d.size(), (d.tokens_per_epoch() - 1) / 16);
}

// ---- bad inputs ----

TEST(GptDatasetErrors, EmptyDatasetAndEmptySplitNameThePath) {
  ScratchDir dir;
  IndexedDatasetBuilder(dir / "empty", TokenDType::kUInt16).finalize();
  GptDataConfig config;
  config.data_path = {dir / "empty"};
  config.seq_length = 8;
  config.cache_path = dir / "cache";
  std::string e = error_of([&] { build_gpt_datasets(config, {10, 1, 1}); });
  EXPECT_NE(e.find(dir / "empty"), std::string::npos) << e;
  EXPECT_NE(e.find("no documents"), std::string::npos) << e;

  // Three documents: "98,1,1" leaves the valid split round(0.98 * 3) .. round(0.99 * 3) empty.
  write_corpus(dir / "three", 3, kUniform, 10);
  config.data_path = {dir / "three"};
  config.split = "98,1,1";
  e = error_of([&] { build_gpt_datasets(config, {10, 1, 1}); });
  EXPECT_NE(e.find(dir / "three"), std::string::npos) << e;
  EXPECT_NE(e.find("valid split (--split '98,1,1') has no documents"), std::string::npos) << e;

  config.split = "1,2,3,4";
  e = error_of([&] { build_gpt_datasets(config, {10, 1, 1}); });
  EXPECT_NE(e.find("--split '1,2,3,4'"), std::string::npos) << e;

  config.data_path = {dir / "missing"};
  config.split = "1";
  e = error_of([&] { build_gpt_datasets(config, {10, 1, 1}); });
  EXPECT_NE(e.find(dir / "missing"), std::string::npos) << e;
}

TEST(GptDatasetErrors, SampleOutOfRange) {
  ScratchDir dir;
  write_corpus(dir / "a", 30, kUniform, 11);
  GptDataset d(std::make_shared<const IndexedDataset>(dir / "a"), Split::kTrain, {0, 30}, 5, small_config(dir / "c"));
  EXPECT_NE(error_of([&] { d.get(d.size()); }).find("out of range"), std::string::npos);
  EXPECT_NE(error_of([&] { d.get(-1); }).find("out of range"), std::string::npos);
  std::vector<int32_t> wrong(3);
  EXPECT_NE(error_of([&] { d.get(0, wrong); }).find("seq_length + 1"), std::string::npos);
}

}  // namespace
}  // namespace tessera::data
