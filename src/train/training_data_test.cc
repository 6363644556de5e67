// `tessera samples` prints what the trainer consumes: the micro-batches of the trainer's first iteration
// hold, row by row, samples 0, 1, ... of build_batch_sources' train split as megatron_sample gives them,
// for GPT and BERT, over one dataset and over a weighted blend.
#include "train/training_data.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "data/gpt_dataset_testing.h"
#include "data/indexed_dataset.h"
#include "train/trainer.h"
#include "train/trainer_testing.h"
#include "train/training_data_testing.h"

namespace tessera::train {
namespace {

using data::testing::ScratchDir;
using testing::expect_bert_row;
using testing::expect_gpt_row;
using testing::field;

constexpr int32_t kWords = 60;  // ids 5 .. 5 + kWords - 1 after [PAD] [UNK] [CLS] [SEP] [MASK]

// A WordPiece vocabulary whose odd words continue a word ("##"), so whole-word masking has work to do.
std::string write_vocabulary(const ScratchDir& dir) {
  const std::string path = dir / "vocab.txt";
  std::ofstream out(path);
  out << "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
  for (int i = 0; i < kWords; ++i) out << (i % 2 ? "##w" : "w") << i << "\n";
  return path;
}

// Documents of 2 to 5 sentences of 3 to 12 ids, deterministic in `salt`; one sequence per sentence.
std::string write_dataset(const ScratchDir& dir, const std::string& name, int documents, int salt) {
  const std::string prefix = dir / name;
  data::IndexedDatasetBuilder builder(prefix, data::TokenDType::kInt32);
  uint32_t x = 12345u + static_cast<uint32_t>(salt);
  auto next = [&x] {
    x = x * 1103515245u + 12345u;
    return (x >> 16) & 0x7fff;
  };
  for (int d = 0; d < documents; ++d) {
    const int sentences = 2 + static_cast<int>(next() % 4);
    for (int s = 0; s < sentences; ++s) {
      std::vector<int32_t> ids(3 + next() % 10);
      for (int32_t& id : ids) id = 5 + static_cast<int32_t>(next() % kWords);
      builder.add_item(ids);
    }
    builder.end_document();
  }
  builder.finalize();
  return prefix;
}

void expect_first_iteration_is_samples(const std::string& flags, bool bert) {
  const TrainArguments a = parse_train_arguments(testing::split_flags(flags));
  Trainer trainer(a);
  const auto sources = build_batch_sources(a);
  ASSERT_NE(sources[0], nullptr);
  int64_t sample = 0;
  int64_t masked = 0;
  for (int64_t m = 0; m < a.num_micro_batches; ++m) {
    const model::MicroBatch mb = trainer.next_micro_batch(m);
    ASSERT_EQ(mb.tokens.shape()[0], a.micro_batch_size);
    for (int64_t b = 0; b < a.micro_batch_size; ++b, ++sample) {
      SCOPED_TRACE(str_cat("micro-batch ", m, ", row ", b, ", sample ", sample));
      const MegatronSample s = sources[0]->megatron_sample(sample);
      if (bert) {
        expect_bert_row(mb, b, s);
        for (int64_t v : field(s, "loss_mask").values) masked += v;
      } else {
        expect_gpt_row(mb, b, s);
      }
    }
  }
  if (bert) {
    EXPECT_GT(masked, 0) << "no masked position: the comparison of labels saw nothing";
  }
}

std::string common_flags(const ScratchDir& dir) {
  return str_cat("--num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 32 --micro-batch-size 2 "
                 "--global-batch-size 4 --lr 1e-3 --train-iters 3 --eval-iters 1 --eval-interval 2 --split 90,10,0 "
                 "--seed 7 --data-cache-path ", dir / "cache", " ");
}

TEST(TrainingData, GptFirstIterationIsTheFirstSamples) {
  ScratchDir dir;
  const std::string one = write_dataset(dir, "one", 40, 1), two = write_dataset(dir, "two", 30, 2);
  const std::string base = common_flags(dir) + "--tokenizer-type NullTokenizer --vocab-size 70 ";
  expect_first_iteration_is_samples(base + "--data-path " + one, false);
  expect_first_iteration_is_samples(base + "--data-path 0.3 " + one + " 0.7 " + two, false);
  expect_first_iteration_is_samples(base + "--data-path " + one + " --reset-position-ids --eod-mask-loss", false);
}

TEST(TrainingData, BertFirstIterationIsTheFirstSamples) {
  ScratchDir dir;
  const std::string one = write_dataset(dir, "one", 40, 1), two = write_dataset(dir, "two", 30, 2);
  const std::string base = common_flags(dir) + "--model-family bert --tokenizer-type BertWordPieceLowerCase "
                                               "--vocab-file " + write_vocabulary(dir) + " ";
  expect_first_iteration_is_samples(base + "--data-path " + one, true);
  expect_first_iteration_is_samples(base + "--data-path 0.3 " + one + " 0.7 " + two, true);
}

TEST(TrainingData, MockFirstIterationIsTheFirstSamples) {
  const std::string base = "--num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 16 --mock-data "
                           "--tokenizer-type NullTokenizer --vocab-size 40 --micro-batch-size 2 --global-batch-size 4 "
                           "--lr 1e-3 --train-iters 1 ";
  expect_first_iteration_is_samples(base, false);
  expect_first_iteration_is_samples(base + "--model-family bert", true);
}

}  // namespace
}  // namespace tessera::train
