#include "tasks/cntrl.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/check.h"
#include "tasks/rake.h"

namespace tessera::tasks {
namespace {

using Strings = std::vector<std::string>;

TEST(Rake, ScoresDegreeOverFrequencyAsThePaper) {
  // Rose et al.'s example: candidates compatibility, systems, linear constraints, set, natural numbers.
  const std::vector<ScoredPhrase> p = rake("Compatibility of systems of linear constraints over the set of natural numbers.");
  ASSERT_EQ(p.size(), 5u);
  EXPECT_EQ(p[0].phrase, "linear constraints");
  EXPECT_DOUBLE_EQ(p[0].score, 4.0);
  EXPECT_EQ(p[1].phrase, "natural numbers");
  EXPECT_DOUBLE_EQ(p[1].score, 4.0);
  EXPECT_EQ(p[2].phrase, "compatibility");
  EXPECT_DOUBLE_EQ(p[2].score, 1.0);
  // big: degree 5 / frequency 2; dog: 6 / 3; barked: 3 / 1.
  const std::vector<ScoredPhrase> d = rake("The big dog. The big dog barked, a dog.");
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].phrase, "big dog barked");
  EXPECT_DOUBLE_EQ(d[0].score, 7.5);
  EXPECT_EQ(d[1].phrase, "big dog");
  EXPECT_DOUBLE_EQ(d[1].score, 4.5);
  EXPECT_DOUBLE_EQ(d[2].score, 2.0);
  // At most two words: the three-word run is no candidate, so it counts for nothing.
  const std::vector<ScoredPhrase> two = rake("The big dog. The big dog barked, a dog.", 2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_DOUBLE_EQ(two[0].score, 3.5);
  // bought, fresh, bread: degree 3 / frequency 1 each.
  EXPECT_EQ(rake_keywords("She went to the store and bought fresh bread.", 2), (Strings{"bought fresh bread", "went"}));
  EXPECT_TRUE(rake("the and of").empty());
}

KnowledgeBase small_kb() {
  const std::filesystem::path path = std::filesystem::temp_directory_path() / "tessera_cntrl_kb.csv";
  std::ofstream(path) << "/a/1\t/r/UsedFor\t/c/en/car/n\t/c/en/driving\t{}\n"
                         "/a/2\t/r/AtLocation\t/c/en/bread\t/c/en/bakery\t{}\n"
                         "/a/3\t/r/IsA\t/c/de/brot\t/c/en/bread\t{}\n"  // not English: skipped
                         "/a/4\t/r/HasLastSubevent\t/c/en/fresh_bread\t/c/en/eat_it\t{}\n"
                         "/a/5\t/r/Desires\t/c/en/dog\t/c/en/bread\t{}\n";
  KnowledgeBase kb = KnowledgeBase::read_conceptnet(path.string());
  std::filesystem::remove(path);
  return kb;
}

TEST(KnowledgeBase, ReadsConceptNetAndTurnsTriplesIntoSentences) {
  const KnowledgeBase kb = small_kb();
  EXPECT_EQ(kb.size(), 4);
  EXPECT_EQ(kb.retrieve("car", 5), (Strings{"car is used for driving"}));
  // A phrase matches by any run of its words, in file order; a relation without a template is spelled out.
  EXPECT_EQ(kb.retrieve("fresh bread", 5),
            (Strings{"bread is at bakery", "fresh bread has last subevent eat it", "dog wants bread"}));
  EXPECT_EQ(kb.retrieve("fresh bread", 1), (Strings{"bread is at bakery"}));
  EXPECT_EQ(kb.retrieve(Strings{"bread", "dog"}, 5), (Strings{"bread is at bakery", "dog wants bread"}));
  EXPECT_TRUE(kb.retrieve("cat", 5).empty());
  const std::filesystem::path bad = std::filesystem::temp_directory_path() / "tessera_cntrl_bad.csv";
  std::ofstream(bad) << "only\ttwo\n";
  EXPECT_THROW(KnowledgeBase::read_conceptnet(bad.string()), Error);
  std::filesystem::remove(bad);
}

TEST(Cntrl, ReadsRocStoriesAndLabelsEverySentence) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() / "tessera_cntrl_stories.csv";
  std::ofstream(path) << "storyid,storytitle,sentence1,sentence2,sentence3\n"
                         "1,Bread,\"Tom was hungry, very.\",She went to the store and bought fresh bread.,"
                         "\"The dog wanted it \"\"too\"\".\"\n";
  const auto stories = read_rocstories(path.string());
  std::filesystem::remove(path);
  ASSERT_EQ(stories.size(), 1u);
  EXPECT_EQ(stories[0], (Strings{"Tom was hungry, very.", "She went to the store and bought fresh bread.",
                                 "The dog wanted it \"too\"."}));
  CntrlOptions o;
  o.keywords_per_sentence = 2;
  o.top_n = 2;
  const std::vector<CntrlExample> e = cntrl_examples(stories, small_kb(), o);
  ASSERT_EQ(e.size(), 2u);  // sentences 2 and 3
  EXPECT_EQ(e[0].context, "Tom was hungry, very.");
  EXPECT_EQ(e[0].target, stories[0][1]);
  EXPECT_EQ(e[0].keywords, (Strings{"bought fresh bread", "went"}));
  EXPECT_EQ(e[0].knowledge, (Strings{"bread is at bakery", "fresh bread has last subevent eat it", "dog wants bread"}));
  // "fresh bread has ..." shares "fresh" and "bread" with the target: the one positive, first of the top.
  EXPECT_EQ(e[0].pseudo_labels, (std::vector<int>{0, 1, 0}));
  ASSERT_EQ(e[0].knowledge_top.size(), 2u);
  EXPECT_EQ(e[0].knowledge_top[0], "fresh bread has last subevent eat it");
  EXPECT_EQ(e[1].context, "Tom was hungry, very. She went to the store and bought fresh bread.");
}

}  // namespace
}  // namespace tessera::tasks
