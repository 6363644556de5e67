#include "tasks/word_tokenize.h"

#include <gtest/gtest.h>

namespace tessera::tasks {
namespace {

using Tokens = std::vector<std::string>;

// The expected tokens are NLTK word_tokenize's conventions (Treebank), written out by hand.
TEST(WordTokenize, TreebankConventions) {
  EXPECT_EQ(word_tokenize("Hello, world!"), (Tokens{"Hello", ",", "world", "!"}));
  EXPECT_EQ(word_tokenize("I don't know."), (Tokens{"I", "do", "n't", "know", "."}));
  EXPECT_EQ(word_tokenize("She said \"hi\" to me."), (Tokens{"She", "said", "``", "hi", "''", "to", "me", "."}));
  EXPECT_EQ(word_tokenize("I cannot go. We gonna win"), (Tokens{"I", "can", "not", "go", ".", "We", "gon", "na", "win"}));
  EXPECT_EQ(word_tokenize("Wait... what?"), (Tokens{"Wait", "...", "what", "?"}));
  EXPECT_EQ(word_tokenize("(a test) it's 1,000 people: many"),
            (Tokens{"(", "a", "test", ")", "it", "'s", "1,000", "people", ":", "many"}));
  EXPECT_EQ(word_tokenize("They'll see J. Smith."), (Tokens{"They", "'ll", "see", "J.", "Smith", "."}));
  EXPECT_EQ(word_tokenized("Yes, it is great."), "Yes , it is great .");
  EXPECT_TRUE(word_tokenize("  ").empty());
}

}  // namespace
}  // namespace tessera::tasks
