// The fine-tuning's micro-batches of questions and its load of a pretrained checkpoint by name.
#include "tasks/finetune_race.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "ckpt/checkpoint.h"
#include "core/check.h"

namespace tessera::tasks {
namespace {

namespace fs = std::filesystem;

tasks::MultipleChoiceSample sample(int32_t label, int32_t base) {
  tasks::MultipleChoiceSample s;
  s.label = label;
  for (int c = 0; c < tasks::kRaceChoices; ++c) {
    const std::vector<int32_t> a{base + c}, b{base + 10};
    s.choices.push_back(tasks::build_tokens_types_paddings(a, &b, 6, 2, 3, 0));
  }
  return s;
}

TEST(MultipleChoiceMicroBatch, ConsecutiveRowsAreAQuestionsChoices) {
  const std::vector<tasks::MultipleChoiceSample> samples{sample(1, 20), sample(3, 40), sample(0, 60)};
  const std::vector<int64_t> indices{2, 0};
  const model::MicroBatch mb = multiple_choice_micro_batch(samples, indices);
  ASSERT_EQ(mb.tokens.shape(), Shape({8, 6}));
  ASSERT_EQ(mb.choice_label.numel(), 2);
  EXPECT_EQ(mb.choice_label.i32()[0], 0);
  EXPECT_EQ(mb.choice_label.i32()[1], 1);
  for (int64_t q = 0; q < 2; ++q)
    for (int64_t c = 0; c < 4; ++c) {
      const tasks::TokensTypesPaddings& t = samples[static_cast<size_t>(indices[q])].choices[c];
      for (int64_t j = 0; j < 6; ++j) {
        const int64_t at = (q * 4 + c) * 6 + j;
        EXPECT_EQ(mb.tokens.i32()[at], t.ids[j]);
        EXPECT_EQ(mb.padding_mask.i32()[at], t.paddings[j]);
        EXPECT_EQ(mb.token_types.i32()[at], t.paddings[j] ? t.types[j] : 0);
      }
    }
  EXPECT_EQ(mb.tokens.i32()[(1 * 4 + 2) * 6 + 1], 22);  // question 1 is sample 0, choice 2: [CLS] 22 ...
}

TEST(LoadPretrainedWeights, ByNameDiscardingAndInitialising) {
  std::string templ = (fs::temp_directory_path() / "finetune_XXXXXX").string();
  ASSERT_NE(mkdtemp(templ.data()), nullptr);
  const fs::path dir = templ;
  auto tensor = [](Shape shape, float first) {
    Tensor t = Tensor::empty(shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = first + static_cast<float>(i);
    return t;
  };
  ckpt::save_full_model((dir / "a").string(), {7, 0, 0, 1, nlohmann::json::object(), nlohmann::json()},
                        {{"encoder.w", tensor({2, 3}, 1)},
                         {"embedding.word_embeddings.weight", tensor({4, 2}, 100)},
                         {"lm_head.dense.weight", tensor({3}, 0)}});
  model::ParameterSet params;
  params.add({"encoder.w", {2, 3}, model::Init::Zeros});
  model::ParameterSpec words{"embedding.word_embeddings.weight", {6, 2}, model::Init::Zeros};
  words.vocab_rows = true;  // padded to 6 rows here, 4 in the checkpoint
  params.add(words);
  params.add({"multichoice_head.weight", {1, 2}, model::Init::Zeros});
  params.allocate(1);
  const PretrainedLoad load = load_pretrained_weights((dir / "a").string(), params);
  EXPECT_EQ(load.iteration, 7);
  EXPECT_EQ(load.loaded, (std::vector<std::string>{"encoder.w", "embedding.word_embeddings.weight"}));
  EXPECT_EQ(load.initialised, (std::vector<std::string>{"multichoice_head.weight"}));
  EXPECT_EQ(load.discarded, (std::vector<std::string>{"lm_head.dense.weight"}));
  EXPECT_EQ(params.get("encoder.w").value.f32()[5], 6.0f);
  const Tensor& w = params.get("embedding.word_embeddings.weight").value;
  EXPECT_EQ(w.f32()[7], 107.0f);  // the rows both have
  EXPECT_EQ(w.f32()[8], 0.0f);    // the others as initialised

  model::ParameterSet other;
  other.add({"encoder.w", {3, 2}, model::Init::Zeros});
  other.allocate(1);
  try {
    load_pretrained_weights((dir / "a").string(), other);
    ADD_FAILURE() << "a tensor of another shape must be an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("encoder.w"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(FinetuneArguments, RulesNameTheFlag) {
  FinetuneArguments a;
  a.pretrained_checkpoint = "x";
  a.micro_batch_size = 4;
  a.lr = 1e-5f;
  EXPECT_NO_THROW(validate(a));
  auto message = [](FinetuneArguments b) {
    try {
      validate(b);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  FinetuneArguments b = a;
  b.task = "MNLI";
  EXPECT_EQ(message(b), "--task=MNLI: must be RACE, CNTRL-RANKER, CNTRL-KEYWORDS or CNTRL-GENERATOR");
  b = a;
  b.epochs = 2;
  EXPECT_EQ(message(b), "--train-data=: is required with --epochs > 0");
  b = a;
  b.lr_warmup_fraction = 1.5;
  EXPECT_EQ(message(b), "--lr-warmup-fraction=1.5: must be in [0, 1)");
  b = a;
  b.lr_decay_style = "step";
  EXPECT_NE(message(b).find("--lr-decay-style"), std::string::npos);
}

}  // namespace
}  // namespace tessera::tasks
