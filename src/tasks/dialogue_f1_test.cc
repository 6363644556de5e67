#include "tasks/dialogue_f1.h"

#include <gtest/gtest.h>

#include "core/check.h"

namespace tessera::tasks {
namespace {

TEST(DialogueF1, NormalizesAsParlAI) {
  EXPECT_EQ(normalize_answer("The Cat, sat on  A mat!"), "cat sat on mat");
  EXPECT_EQ(normalize_answer("don't (x)_y"), "don t x y");
  EXPECT_EQ(normalize_answer("Theatre an anthem"), "theatre anthem");  // whole words only
}

TEST(DialogueF1, HandComputedPairs) {
  // "cat sat on mat" against "cat is on mat": 3 of 4 either way.
  auto r = token_f1("The cat sat on the mat.", "a cat is on a mat");
  ASSERT_TRUE(r.has_value());
  EXPECT_DOUBLE_EQ(r->precision, 0.75);
  EXPECT_DOUBLE_EQ(r->recall, 0.75);
  EXPECT_DOUBLE_EQ(r->f1, 0.75);
  // Repeated guess tokens count once per gold occurrence: p 1/3, r 1/2, f1 0.4.
  r = token_f1("dog dog dog", "dog cat");
  EXPECT_NEAR(r->precision, 1.0 / 3, 1e-15);
  EXPECT_DOUBLE_EQ(r->recall, 0.5);
  EXPECT_NEAR(r->f1, 0.4, 1e-15);
  // The apostrophe splits "don't"; only "stop" is shared.
  r = token_f1("Don't stop!", "do not stop");
  EXPECT_NEAR(r->f1, 1.0 / 3, 1e-15);
  EXPECT_DOUBLE_EQ(token_f1("An apple", "apple")->f1, 1.0);
  EXPECT_DOUBLE_EQ(token_f1("", "apple")->f1, 0.0);  // an empty guess scores 0
  EXPECT_FALSE(token_f1("apple", "").has_value());   // an empty answer does not count
  EXPECT_DOUBLE_EQ(token_f1("pear", "apple")->f1, 0.0);
}

TEST(DialogueF1, MeansSkipEmptyAnswers) {
  const PrecisionRecallF1 m = mean_token_f1({"The cat sat on the mat.", "anything", ""}, {"a cat is on a mat", "", "x"});
  EXPECT_DOUBLE_EQ(m.precision, 0.375);
  EXPECT_DOUBLE_EQ(m.recall, 0.375);
  EXPECT_DOUBLE_EQ(m.f1, 0.375);
  EXPECT_THROW(mean_token_f1({"a"}, {"a", "b"}), Error);
  EXPECT_THROW(mean_token_f1({"a"}, {""}), Error);
}

}  // namespace
}  // namespace tessera::tasks
