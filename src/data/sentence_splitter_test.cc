#include "data/sentence_splitter.h"

#include <gtest/gtest.h>

namespace tessera::data {
namespace {

using Sentences = std::vector<std::string_view>;

Sentences split(std::string_view text, bool keep_newlines = false) {
  return SentenceSplitter(keep_newlines).split(text);
}

TEST(SentenceSplitter, EndsAtPeriodsQuestionAndExclamationMarks) {
  EXPECT_EQ(split("The jury met. It said nothing? Yes! Then it left."),
            (Sentences{"The jury met.", "It said nothing?", "Yes!", "Then it left."}));
  EXPECT_EQ(split("Really?! No... Wait... what?? Fine.."),
            (Sentences{"Really?!", "No...", "Wait... what??", "Fine.."}));
  EXPECT_EQ(split("Ends\xE2\x80\xA6 Then more."), (Sentences{"Ends\xE2\x80\xA6", "Then more."}));
}

TEST(SentenceSplitter, NeedsWhitespaceAndAPlausibleStart) {
  EXPECT_EQ(split("Pi is 3.14 and e is 2.72. See www.example.org for more."),
            (Sentences{"Pi is 3.14 and e is 2.72.", "See www.example.org for more."}));
  // A lower-case word, a comma or a semicolon after the mark continues the sentence.
  EXPECT_EQ(split("\"Who?\" he asked. \"Me!\" , she said; yes. ok then."),
            (Sentences{"\"Who?\" he asked.", "\"Me!\" , she said; yes. ok then."}));
  EXPECT_EQ(split("It rose 5%. 1961 was worse. -- The end."),
            (Sentences{"It rose 5%.", "1961 was worse.", "-- The end."}));
}

TEST(SentenceSplitter, ClosingQuotesAndBracketsStayWithTheirSentence) {
  EXPECT_EQ(split("He said, \"Go home.\" She went. (It was late.) They slept."),
            (Sentences{"He said, \"Go home.\"", "She went.", "(It was late.)", "They slept."}));
  // Closers written apart from the sentence still close it.
  EXPECT_EQ(split("It disagreed, however. ) There was more. \" And then?"),
            (Sentences{"It disagreed, however. )", "There was more. \"", "And then?"}));
  EXPECT_EQ(split("\xE2\x80\x9CStop.\xE2\x80\x9D \xE2\x80\x9CWhy?\xE2\x80\x9D"),
            (Sentences{"\xE2\x80\x9CStop.\xE2\x80\x9D", "\xE2\x80\x9CWhy?\xE2\x80\x9D"}));
}

TEST(SentenceSplitter, TitlesNeverEndASentence) {
  EXPECT_EQ(split("Mr. Smith met Dr. Jones and Sen. Mrs. Brown at St. Louis with ex-Gov. Knight."),
            Sentences{"Mr. Smith met Dr. Jones and Sen. Mrs. Brown at St. Louis with ex-Gov. Knight."});
  EXPECT_EQ(split("He saw Atty. Gen. Stanley Mosk. He left."),
            (Sentences{"He saw Atty. Gen. Stanley Mosk.", "He left."}));
}

TEST(SentenceSplitter, InitialsAndAcronymsEndOnlyBeforeASentenceStarter) {
  EXPECT_EQ(split("J. F. Kennedy and T. S. Eliot met in the U.S. Senate."),
            Sentences{"J. F. Kennedy and T. S. Eliot met in the U.S. Senate."});
  EXPECT_EQ(split("He moved to the U.S. The move was hard. It was Plan B. Then came C."),
            (Sentences{"He moved to the U.S.", "The move was hard.", "It was Plan B.", "Then came C."}));
  // `A.` is an initial, not the word `A`.
  EXPECT_EQ(split("Ask John Q. A. Smith."), Sentences{"Ask John Q. A. Smith."});
}

TEST(SentenceSplitter, AbbreviationsAndNumbers) {
  EXPECT_EQ(split("Apples, pears, etc. were sold by Acme Inc. Jones and Smith Co. in Jan. 1961."),
            Sentences{"Apples, pears, etc. were sold by Acme Inc. Jones and Smith Co. in Jan. 1961."});
  EXPECT_EQ(split("They sold fruit, etc. But nobody came. See No. 5 and Fig. 3 on pp. 12-14."),
            (Sentences{"They sold fruit, etc.", "But nobody came.", "See No. 5 and Fig. 3 on pp. 12-14."}));
  // Without a number after it, `No.` is the word.
  EXPECT_EQ(split("He said No. Then he left at 9 a.m. sharp, e.g. by car, i.e. fast."),
            (Sentences{"He said No.", "Then he left at 9 a.m. sharp, e.g. by car, i.e. fast."}));
  EXPECT_EQ(split("Born in 1917. Died in 1963."), (Sentences{"Born in 1917.", "Died in 1963."}));
  // Abbreviations match as written: `Wash.` is the state, `wash.` the word.
  EXPECT_EQ(split("Seattle, Wash. Boeing grew. Time to wash. Boeing grew."),
            (Sentences{"Seattle, Wash. Boeing grew.", "Time to wash.", "Boeing grew."}));
  SentenceSplitter custom;
  custom.add_abbreviation("Approx");
  EXPECT_EQ(custom.split("Approx. Ten came."), Sentences{"Approx. Ten came."});
  EXPECT_EQ(split("Approx. Ten came."), (Sentences{"Approx.", "Ten came."}));
}

TEST(SentenceSplitter, BlankLinesEndSentencesAndSingleNewlinesDoNot) {
  EXPECT_EQ(split("A headline\n\nThe text\nwraps here. Next one.\n \n\tLast"),
            (Sentences{"A headline", "The text\nwraps here.", "Next one.", "Last"}));
  EXPECT_TRUE(split("").empty());
  EXPECT_TRUE(split(" \n\n\t ").empty());
  EXPECT_EQ(split("  One.  "), Sentences{"One."});
}

TEST(SentenceSplitter, KeepNewlinesKeepsTheWhitespaceAfterEachSentence) {
  const std::string_view text = "\nFirst one.\n\nSecond one.  Third\n\n";
  EXPECT_EQ(split(text, true), (Sentences{"\nFirst one.\n\n", "Second one.  ", "Third"}));
  EXPECT_EQ(split(text, false), (Sentences{"First one.", "Second one.", "Third"}));
  // The spans cover the text up to its trailing whitespace.
  const std::vector<SentenceSpan> spans = SentenceSplitter(true).spans(text);
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_EQ(spans.front().begin, 0u);
  for (size_t i = 0; i + 1 < spans.size(); ++i) EXPECT_EQ(spans[i].end, spans[i + 1].begin);
  EXPECT_EQ(spans.back().end, text.size() - 2);
}

}  // namespace
}  // namespace tessera::data
