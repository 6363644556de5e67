#include "data/blended_dataset.h"

#include <gtest/gtest.h>

#include <functional>

#include "data/gpt_dataset_testing.h"
#include "data/indexed_dataset.h"
#include "core/testing.h"

namespace tessera::data {
namespace {

using testing::read_i64;
using testing::run_reference;
using testing::ScratchDir;

using ::tessera::testing::error_of;

DataBlend parse(std::vector<std::string> values) { return parse_data_path(values); }

TEST(DataPath, SinglePathHasNoWeights) {
  DataBlend b = parse({"data/corpus_text_document"});
  EXPECT_EQ(b.prefixes, std::vector<std::string>{"data/corpus_text_document"});
  EXPECT_FALSE(b.weights.has_value());
}

TEST(DataPath, WeightedPairs) {
  DataBlend b = parse({"30", "a", " 70 ", " b "});
  EXPECT_EQ(b.prefixes, (std::vector<std::string>{"a", "b"}));
  ASSERT_TRUE(b.weights.has_value());
  EXPECT_EQ(*b.weights, (std::vector<double>{30.0, 70.0}));
  EXPECT_EQ(normalize_weights(*b.weights), (std::vector<double>{0.3, 0.7}));
  EXPECT_EQ(*parse({"1e-3", "a", "0.5", "b"}).weights, (std::vector<double>{1e-3, 0.5}));
}

TEST(DataPath, UnweightedLists) {
  EXPECT_EQ(parse({"a", "b"}).prefixes, (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(parse({"a", "b"}).weights);
  EXPECT_EQ(parse({"a", "b", "c"}).prefixes.size(), 3u);
  EXPECT_FALSE(parse({"a", "b", "c"}).weights);
}

TEST(DataPath, BadValuesNameTheFlag) {
  for (const auto& bad : std::vector<std::vector<std::string>>{
           {}, {"0.5", "a", "b", "c"}, {"-1", "a", "2", "b"}, {"0", "a", "0", "b"}, {"inf", "a", "1", "b"}, {"1", " "}}) {
    const std::string e = error_of([&] { parse(bad); });
    EXPECT_EQ(e.rfind("--data-path", 0), 0u) << e;
  }
}

TEST(BlendingIndices, GreedyChoiceOnSmallExample) {
  // Weights 0.5 / 0.5: ties go to the first dataset, then the other catches up.
  const std::vector<double> w = {0.5, 0.5};
  const auto idx = build_blending_indices(w, 6);
  EXPECT_EQ(idx.dataset_index, (std::vector<int16_t>{0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(idx.dataset_sample_index, (std::vector<int64_t>{0, 0, 1, 1, 2, 2}));
}

TEST(BlendingIndices, MatchMegatron) {
  // Weight lists that make ties and rounding matter: thirds, tiny weights, many datasets (NumPy's
  // pairwise sum above 8), a zero weight.
  const std::vector<std::string> cases = {
      "1,1,1", "0.3,0.5,0.2", "30,70", "1,2,3,4,5,6,7,8,9,10,11", "0.001,0.999", "5,0,5", "0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1",
  };
  for (const std::string& weights : cases) {
    ScratchDir dir;
    const int64_t size = 20011;
    ASSERT_EQ(run_reference(str_cat("blend --weights ", weights, " --size ", size), dir.path()), "");
    std::vector<double> w;
    for (size_t pos = 0; pos <= weights.size();) {
      size_t comma = std::min(weights.find(',', pos), weights.size());
      w.push_back(std::stod(weights.substr(pos, comma - pos)));
      pos = comma + 1;
    }
    const auto idx = build_blending_indices(normalize_weights(normalize_weights(w)), size);
    EXPECT_EQ(std::vector<int64_t>(idx.dataset_index.begin(), idx.dataset_index.end()), read_i64(dir / "dataset_index.i64"))
        << weights;
    EXPECT_EQ(idx.dataset_sample_index, read_i64(dir / "dataset_sample_index.i64")) << weights;
  }
}

// A dataset of `n` samples whose tokens say which dataset and sample they are.
class Labelled : public TokenDataset {
 public:
  Labelled(int32_t id, int64_t n) : id_(id), n_(n) {}
  int64_t size() const override { return n_; }
  int64_t seq_length() const override { return 2; }
  void get(int64_t index, std::span<int32_t> out) const override {
    out[0] = id_;
    out[1] = static_cast<int32_t>(index);
    out[2] = -1;
  }
  using TokenDataset::get;

 private:
  int32_t id_;
  int64_t n_;
};

TEST(BlendedDataset, SamplesComeFromTheIndexedDatasets) {
  std::vector<std::shared_ptr<const TokenDataset>> parts = {std::make_shared<Labelled>(0, 100),
                                                            std::make_shared<Labelled>(1, 100)};
  const std::vector<double> w = {1, 3};
  BlendedDataset blend(parts, w, 40);
  EXPECT_EQ(blend.weights(), (std::vector<double>{0.25, 0.75}));
  for (int64_t i = 0; i < blend.size(); ++i) {
    const auto s = blend.get(i);
    EXPECT_EQ(s[0], blend.indices().dataset_index[i]);
    EXPECT_EQ(s[1], blend.indices().dataset_sample_index[i]);
  }
  EXPECT_NE(error_of([&] { blend.get(40); }).find("out of range"), std::string::npos);
}

TEST(BlendedDataset, ShortPartIsAClearError) {
  std::vector<std::shared_ptr<const TokenDataset>> parts = {std::make_shared<Labelled>(0, 2),
                                                            std::make_shared<Labelled>(1, 100)};
  const std::vector<double> w = {1, 1};
  BlendedDataset blend(parts, w, 10);
  EXPECT_EQ(blend.indices().dataset_index[4], 0);
  EXPECT_EQ(blend.indices().dataset_sample_index[4], 2);  // the third sample of a 2-sample dataset
  EXPECT_NE(error_of([&] { blend.get(4); }).find("which has only 2"), std::string::npos);
}

// Twenty documents of 40 tokens at `prefix`.
void write_documents(const std::string& prefix) {
  IndexedDatasetBuilder b(prefix, TokenDType::kUInt16);
  std::vector<int32_t> tokens(40);
  for (int d = 0; d < 20; ++d) {
    for (int i = 0; i < 40; ++i) tokens[i] = (d + i) % 50;
    b.add_document(tokens);
  }
  b.finalize();
}

TEST(BuildGptDatasets, TestSplitWithoutDocumentsIsOptional) {
  ScratchDir dir;
  write_documents(dir / "docs");
  GptDataConfig config;
  config.seq_length = 8;
  config.cache_path = dir / "cache";
  // 949,50,1 of 20 documents gives the test split none; samples asked of it are an error by default.
  config.split = "949,50,1";
  for (const std::vector<std::string>& path :
       {std::vector<std::string>{dir / "docs"}, {"1", dir / "docs", "1", dir / "docs"}, {dir / "docs", dir / "docs"}}) {
    config.data_path = path;
    config.test_split_optional = false;
    EXPECT_NE(error_of([&] { build_gpt_datasets(config, {16, 8, 8}); }).find("has no documents"), std::string::npos)
        << path.size();
    config.test_split_optional = true;
    const auto sets = build_gpt_datasets(config, {16, 8, 8});
    EXPECT_NE(sets[0], nullptr);
    EXPECT_NE(sets[1], nullptr);
    EXPECT_EQ(sets[2], nullptr) << path.size();
  }
  // 80,10,10 gives it 2 documents: it is built.
  config.data_path = {dir / "docs"};
  config.split = "80,10,10";
  const auto sets = build_gpt_datasets(config, {16, 8, 8});
  ASSERT_NE(sets[2], nullptr);
  EXPECT_GE(sets[2]->size(), 8);
}

TEST(MegatronNumSamples, FollowsTraining) {
  // train_iters * gbs; (train_iters // eval_interval + 1) * eval_iters * gbs; eval_iters * gbs.
  EXPECT_EQ(megatron_num_samples(1000, 16, 100, 10), (std::array<int64_t, 3>{16000, 1760, 160}));
  EXPECT_EQ(megatron_num_samples(200, 8, 1000, 4), (std::array<int64_t, 3>{1600, 32, 32}));
}

}  // namespace
}  // namespace tessera::data
