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

namespace tessera::train {
namespace {

using data::testing::ScratchDir;

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

int32_t at(const Tensor& t, int64_t i) { return t.dtype() == DType::I32 ? t.i32()[i] : static_cast<int32_t>(t.f32()[i]); }

const SampleField& field(const MegatronSample& s, const std::string& name) {
  for (const SampleField& f : s)
    if (f.name == name) return f;
  throw Error(str_cat("no field ", name));
}

// Row b of `mb` against GPTDataset's fields of the same sample.
void expect_gpt_row(const model::MicroBatch& mb, int64_t b, const MegatronSample& s) {
  const int64_t seq = mb.tokens.shape()[1];
  for (int64_t j = 0; j < seq; ++j) {
    ASSERT_EQ(at(mb.tokens, b * seq + j), field(s, "tokens").values[j]) << "position " << j;
    ASSERT_EQ(at(mb.labels, b * seq + j), field(s, "labels").values[j]) << "position " << j;
    ASSERT_EQ(at(mb.loss_mask, b * seq + j), field(s, "loss_mask").values[j]) << "position " << j;
    ASSERT_EQ(mb.positions.defined() ? at(mb.positions, b * seq + j) : j, field(s, "position_ids").values[j]);
  }
}

// Row b of `mb` against BERT's fields: the trainer's labels are 0 where Megatron's are -1 (not predicted),
// its padding mask and token types 0 on padding.
void expect_bert_row(const model::MicroBatch& mb, int64_t b, const MegatronSample& s) {
  const int64_t seq = mb.tokens.shape()[1];
  for (int64_t j = 0; j < seq; ++j) {
    const int64_t label = field(s, "labels").values[j], padding = field(s, "padding_mask").values[j];
    ASSERT_EQ(at(mb.tokens, b * seq + j), field(s, "text").values[j]) << "position " << j;
    ASSERT_EQ(at(mb.loss_mask, b * seq + j), field(s, "loss_mask").values[j]) << "position " << j;
    ASSERT_EQ(at(mb.labels, b * seq + j), label < 0 ? 0 : label) << "position " << j;
    ASSERT_EQ(at(mb.padding_mask, b * seq + j), padding == 1 ? 1 : 0) << "position " << j;
    ASSERT_EQ(at(mb.token_types, b * seq + j), padding == 1 ? field(s, "types").values[j] : 0) << "position " << j;
  }
  EXPECT_EQ(at(mb.sentence_order, b), field(s, "is_random").values[0]);
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
