// Knowledge distillation in the trainer (--kd, --load-teacher, staged by --kd-stop-iteration), in one
// process: the flags' rules with the teacher's checkpoint read before any work; a teacher equal to the
// student adds a KD term of 0 and no gradient; α and β weight the two gradients; the KD term ends at the
// stop iteration, after which the run is the LM-only run resumed from there and the teacher never runs;
// and teachers of other shapes (deeper, wider, MoE) distil into dense and MoE students.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

#include "model/vocab_parallel_distillation.h"
#include "train/trainer.h"
#include "train/trainer_testing.h"

namespace tessera::train {
namespace {

namespace fs = std::filesystem;
using testing::split_flags;

// Dropout off, so a teacher (which never drops out) equal to the student gives the student's logits.
const std::string kModel =
    "--hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data --tokenizer-type NullTokenizer "
    "--vocab-size 40 --make-vocab-size-divisible-by 64 --micro-batch-size 2 --global-batch-size 4 --lr 3e-3 "
    "--log-interval 100 --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 --clip-grad 0 ";
const std::string kStudent = kModel + "--num-layers 2 ";
const char* kKd = model::kDistillationLossName;

std::unique_ptr<Trainer> run(const std::string& flags) {
  auto t = std::make_unique<Trainer>(parse_train_arguments(split_flags(flags)));
  t->train();
  return t;
}

std::string error_of(const std::string& flags, int world = 1) {
  try {
    parse_train_arguments(split_flags(flags), world);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Teachers, each trained when a test first names it (CTest runs every test in a process of its own):
// `same` has the student's configuration; the others differ.
class Distillation : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / str_cat("tessera_distillation_test_", ::getpid());
    fs::remove_all(dir_);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static fs::path teacher_dir(const std::string& name) {
    const std::map<std::string, std::string> flags{
        {"same", kStudent},
        {"deeper_moe", kModel + "--num-layers 3 --num-experts 4 --moe-layer-freq 2 --moe-router-topk 2 "
                       "--moe-ffn-hidden-size 32"},
        {"wider", kModel + "--num-layers 3 --hidden-size 64 --ffn-hidden-size 96"},
        {"other_padding", kStudent + "--make-vocab-size-divisible-by 128"},
        {"other_vocabulary", kStudent + "--vocab-size 50"},
        {"short", kModel + "--num-layers 2 --seq-length 8"}};
    const fs::path dir = dir_ / name;
    if (!fs::exists(dir)) run(flags.at(name) + " --train-iters 2 --save " + dir.string());
    return dir;
  }
  static std::string teacher(const std::string& name) { return " --kd --load-teacher " + teacher_dir(name).string(); }
  static fs::path dir_;
};
fs::path Distillation::dir_;

TEST_F(Distillation, FlagsAndTheTeacherAreCheckedBeforeAnyWork) {
  const std::string s = kStudent + "--train-iters 2";
  const auto has = [](const std::string& error, const std::string& text) {
    return error.find(text) != std::string::npos ? ::testing::AssertionSuccess()
                                                 : ::testing::AssertionFailure() << "'" << text << "' not in: " << error;
  };
  EXPECT_TRUE(has(error_of(s + " --kd"), "--kd=set: needs --load-teacher DIR"));
  EXPECT_TRUE(has(error_of(s + " --load-teacher /x"), "--load-teacher=/x: needs --kd"));
  EXPECT_TRUE(has(error_of(s + " --kd-temp 2"), "--kd-temp=2: needs --kd"));
  EXPECT_TRUE(has(error_of(s + " --kd-stop-iteration 5"), "--kd-stop-iteration=5: needs --kd"));
  const std::string kd = s + teacher("same");
  EXPECT_EQ(error_of(kd), "");
  EXPECT_TRUE(has(error_of(kd + " --kd-temp 0"), "--kd-temp=0: must be positive"));
  EXPECT_TRUE(has(error_of(kd + " --kd-alpha-ce -1"), "--kd-alpha-ce=-1: must be >= 0"));
  EXPECT_TRUE(has(error_of(kd + " --kd-beta-ce -0.5"), "--kd-beta-ce=-0.5: must be >= 0"));
  EXPECT_TRUE(has(error_of(kd + " --kd-alpha-ce 0 --kd-beta-ce 0"), "leave nothing to train on"));
  EXPECT_TRUE(has(error_of(kd + " --kd-stop-iteration -1"), "--kd-stop-iteration=-1: must be >= 0"));
  EXPECT_TRUE(has(error_of(s + " --kd --load-teacher " + (dir_ / "none").string()), "holds no checkpoint"));
  EXPECT_TRUE(has(error_of(s + teacher("other_vocabulary")), "vocabulary has 51 ids, the student's 41"));
  EXPECT_TRUE(has(error_of(s + teacher("other_padding")), "the teacher's padded vocabulary is 128, the student's 64"));
  EXPECT_TRUE(has(error_of(s + teacher("short")), "learned position embeddings cover 8 positions"));
  // Rules of the layout the teacher is built in: its experts at tp 2 need --sequence-parallel.
  EXPECT_TRUE(has(error_of(s + " --tensor-model-parallel-size 2 --make-vocab-size-divisible-by 32" +
                               teacher("deeper_moe"), 2),
                  "experts need --sequence-parallel"));
  EXPECT_EQ(error_of(s + " --tensor-model-parallel-size 2 --make-vocab-size-divisible-by 32 --sequence-parallel" +
                         teacher("deeper_moe"), 2),
            "");
}

// The student starts from the teacher's own weights: the teacher's logits are the student's, so the first
// iteration's KD term is exactly 0 and its gradients are exactly the LM loss's.
TEST_F(Distillation, ATeacherEqualToTheStudentAddsNothing) {
  const std::string s = kStudent + "--train-iters 1 --load " + teacher_dir("same").string() + " --finetune";
  const auto plain = run(s);
  const auto kd = run(s + teacher("same") + " --kd-temp 2");
  EXPECT_EQ(kd->losses(), plain->losses());
  EXPECT_EQ(kd->auxiliary_losses().at(kKd), std::vector<double>{0.0});
  const Tensor& a = kd->parameters().grads();
  const Tensor& b = plain->parameters().grads();
  ASSERT_EQ(a.numel(), b.numel());
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.f32()[i], b.f32()[i]) << "gradient element " << i;
}

// One step from the same weights: the lm loss is the cross-entropy whatever the weights, the KD term is
// β times the β = 1 one, and the gradient is α times the LM loss's plus β times the KD term's.
TEST_F(Distillation, AlphaAndBetaWeightTheTwoGradients) {
  const std::string s = kStudent + "--train-iters 1" + teacher("wider") + " --kd-temp 1.5";
  const auto ce = run(s + " --kd-alpha-ce 1 --kd-beta-ce 0");
  const auto kl = run(s + " --kd-alpha-ce 0 --kd-beta-ce 1");
  const auto mix = run(s + " --kd-alpha-ce 0.3 --kd-beta-ce 2");
  EXPECT_EQ(ce->losses(), kl->losses());
  EXPECT_EQ(ce->losses(), mix->losses());
  EXPECT_EQ(ce->auxiliary_losses().at(kKd)[0], 0.0);
  const double term = kl->auxiliary_losses().at(kKd)[0];
  EXPECT_GT(term, 0.01);
  EXPECT_NEAR(mix->auxiliary_losses().at(kKd)[0], 2 * term, 1e-6 * term);
  const Tensor& g_ce = ce->parameters().grads();
  const Tensor& g_kl = kl->parameters().grads();
  const Tensor& g = mix->parameters().grads();
  double scale = 0, worst = 0;
  for (int64_t i = 0; i < g.numel(); ++i) {
    const double want = 0.3 * g_ce.f32()[i] + 2.0 * g_kl.f32()[i];
    scale = std::max(scale, std::abs(want));
    worst = std::max(worst, std::abs(g.f32()[i] - want));
  }
  EXPECT_GT(scale, 0);
  EXPECT_LE(worst, 1e-5 * scale);
}

// --kd-stop-iteration 3: iterations 1-3 distil (the teacher runs for each micro-batch), 4-6 do not, and
// they are the LM-only run resumed from iteration 3's checkpoint, bit for bit. A run resumed past the
// stop iteration does not load the teacher at all.
TEST_F(Distillation, StagedDistillationEndsAtTheStopIteration) {
  const fs::path save = dir_ / "staged";
  const std::string s = kStudent + "--train-iters 6";
  const auto staged =
      run(s + teacher("wider") + " --kd-stop-iteration 3 --save " + save.string() + " --save-interval 3");
  EXPECT_EQ(staged->teacher_forwards(), 3 * 2);  // 2 micro-batches per iteration
  const std::vector<double>& term = staged->auxiliary_losses().at(kKd);
  ASSERT_EQ(term.size(), 6u);
  for (int i = 0; i < 3; ++i) EXPECT_GT(term[i], 0.0) << "iteration " << i + 1;
  for (int i = 3; i < 6; ++i) EXPECT_EQ(term[i], 0.0) << "iteration " << i + 1;

  fs::remove_all(save / "iter_0000006");
  std::ofstream(save / "latest_checkpointed_iteration.txt") << 3;
  const auto resumed = run(s + " --load " + save.string());
  const auto resumed_kd = run(s + " --load " + save.string() + teacher("wider") + " --kd-stop-iteration 3");
  EXPECT_EQ(resumed_kd->teacher_forwards(), 0);
  const std::vector<double> after(staged->losses().begin() + 3, staged->losses().end());
  EXPECT_EQ(resumed->losses(), after);
  EXPECT_EQ(resumed_kd->losses(), after);
  EXPECT_EQ(resumed_kd->auxiliary_losses().at(kKd), (std::vector<double>{0, 0, 0}));
}

// Mixture-of-Students: a deeper MoE teacher into a dense student and into a smaller MoE student, a wider
// dense teacher into the dense student; the KD term is in validation too while distilling.
TEST_F(Distillation, TeachersOfOtherShapesDistilIntoDenseAndMoeStudents) {
  const std::string moe_student = "--num-experts 2 --moe-router-topk 1 --moe-ffn-hidden-size 32 --moe-aux-loss-coeff 0.01";
  for (const std::string& flags : {kStudent + teacher("deeper_moe"), kStudent + teacher("wider"),
                                   kStudent + moe_student + teacher("deeper_moe")}) {
    SCOPED_TRACE(flags);
    Trainer t(parse_train_arguments(split_flags(flags + " --train-iters 3 --eval-iters 1 --eval-interval 10")));
    t.train();
    EXPECT_EQ(t.teacher_forwards(), 3 * 2 + 2);  // and one validation batch of 2 micro-batches
    for (double v : t.auxiliary_losses().at(kKd)) EXPECT_TRUE(std::isfinite(v) && v > 0) << v;
    const Evaluation e = t.evaluate();
    bool found = false;
    for (const auto& [name, value] : e.auxiliary)
      if (name == kKd) found = value > 0;
    EXPECT_TRUE(found) << "no positive kd loss in the validation";
  }
}

}  // namespace
}  // namespace tessera::train
