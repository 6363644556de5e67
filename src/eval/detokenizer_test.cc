#include "eval/detokenizer.h"

#include <gtest/gtest.h>

namespace tessera::eval {
namespace {

TEST(WikitextDetokenizer, HandWorkedExample) {
  std::string in =
      " = Robert Boulter = \n Robert is an English film , television and theatre actor . He had a guest @-@ "
      "starring role in 2000 ( the film ) , 1 @,@ 000 people and 3 @.@ 5 m . \" Quoted text \" it 's fine \n";
  std::string want =
      " = Robert Boulter =\nRobert is an English film, television and theatre actor. He had a guest-starring role in "
      "2000 (the film), 1,000 people and 3.5 m. \"Quoted text\" it's fine\n";
  EXPECT_EQ(wikitext_detokenize(in), want);
}

TEST(WikitextDetokenizer, HeadingsBracketsQuotesAndDegrees) {
  EXPECT_EQ(wikitext_detokenize(" = = Section = = \n"), " == Section ==\n");
  EXPECT_EQ(wikitext_detokenize(" = = = Sub = = = \n"), " === Sub ===\n");
  EXPECT_EQ(wikitext_detokenize("a [ b c ] { d } e"), "a [b c] {d} e");
  EXPECT_EQ(wikitext_detokenize("the players ' union"), "the players' union");
  EXPECT_EQ(wikitext_detokenize("x ' quoted ' y"), "x 'quoted' y");
  EXPECT_EQ(wikitext_detokenize("at 5 \u00b0 C"), "at 5\u00b0C");
  EXPECT_EQ(wikitext_detokenize("( spans\n lines )"), "(spans\nlines)");  // [^)] crosses newlines
  EXPECT_EQ(wikitext_detokenize("a N b"), "a 1 b");
  // Unicode whitespace inside brackets is stripped too (Python's \s).
  EXPECT_EQ(wikitext_detokenize("(\u00a0x\u00a0)"), "(x)");
}

TEST(PtbDetokenizer, Replacements) {
  EXPECT_EQ(ptb_detokenize("it 's $ 1 and # 1 , do n't \n x N things"), "it's $1 and #1 , don't\nx1 things");
}

TEST(Detokenizer, ChosenByPathAsMegatron) {
  EXPECT_EQ(detokenize_for_path("data/wiki.test.tokens", "a @-@ b"), "a-b");
  EXPECT_EQ(detokenize_for_path("data/ptb.test.txt", "do n't"), "don't");
  EXPECT_EQ(detokenize_for_path("data/lambada_test.jsonl", "a @-@ b"), "a @-@ b");
}

}  // namespace
}  // namespace tessera::eval
