// MEGATRON-CNTRL's story requests and its controllability measure (the stories themselves, which need
// three fine-tuned models, are tests/cntrl_pipeline_cli.sh's).
#include "tasks/cntrl_story.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/check.h"

namespace tessera::tasks {
namespace {

namespace fs = std::filesystem;
using Strings = std::vector<std::string>;

KnowledgeBase food_kb() {
  KnowledgeBase kb;
  kb.add({"AtLocation", "bread", "bakery"});
  kb.add({"Desires", "dog", "bread"});
  kb.add({"UsedFor", "car", "driving"});
  kb.add({"HasLastSubevent", "fresh bread", "eat it"});
  return kb;
}

TEST(KnowledgeBase, NeighboursAreTheConceptsOfTheKeywordsTriples) {
  const KnowledgeBase kb = food_kb();
  EXPECT_EQ(kb.neighbours("bread"), (Strings{"bakery", "bread", "dog"}));
  // Any run of the keyword's words, lower-cased.
  EXPECT_EQ(kb.neighbours("Fresh Bread"), (Strings{"bakery", "bread", "dog", "eat it", "fresh bread"}));
  EXPECT_EQ(kb.retrieve("CAR", 5), (Strings{"car is used for driving"}));
  EXPECT_TRUE(kb.neighbours("cat").empty());
}

TEST(Controllability, MentionsMatchWholeWordsOfTheKeywordOrItsNeighbours) {
  const KnowledgeBase kb = food_kb();
  EXPECT_TRUE(mentions("She walked to the Bakery.", "bread", kb));  // a neighbour, any case
  EXPECT_TRUE(mentions("The dog barked.", "bread", kb));
  EXPECT_TRUE(mentions("They went to eat it all.", "fresh bread", kb));  // a neighbour of several words
  EXPECT_FALSE(mentions("The bakers slept.", "bakery", kb));              // not a word of the sentence
  EXPECT_FALSE(mentions("Cats dogged him.", "dog", kb));
  EXPECT_TRUE(mentions("A cat sat.", "cat", kb));  // the keyword itself, without triples
  EXPECT_FALSE(mentions("", "cat", kb));
  EXPECT_FALSE(mentions("A cat sat.", "", kb));
}

TEST(Controllability, CountsOnlyTheSentencesWithGivenKeywords) {
  const KnowledgeBase kb = food_kb();
  std::vector<StoryRequest> requests(2);
  requests[0].keywords = {std::nullopt, Strings{"car"}, Strings{"bread", "zebra"}};
  requests[1].keywords = {Strings{"zebra"}, Strings{"dog"}, Strings{"car"}, Strings{"car"}, Strings{"car"}};
  std::vector<Story> stories(2);
  for (const char* s : {"He sang.", "He went driving.", "The zebra ate.", "unused"})
    stories[0].sentences.push_back({.sentence = s});
  for (const char* s : {"A zebra ran.", "It was late.", "A car came."})  // fewer sentences than keywords
    stories[1].sentences.push_back({.sentence = s});
  const Controllability c = controllability(stories, requests, kb);
  EXPECT_EQ(c.controlled, 5);  // story 0: two; story 1: its three sentences
  EXPECT_EQ(c.hits, 4);        // driving (a neighbour of car), zebra, zebra, car; not "late"
  stories.pop_back();
  EXPECT_THROW(controllability(stories, requests, kb), Error);
}

class StoryRequests : public ::testing::Test {
 protected:
  std::string write(const std::string& text) {
    std::ofstream(path_) << text;
    return path_.string();
  }
  void TearDown() override { fs::remove(path_); }
  fs::path path_ = fs::temp_directory_path() / ("tessera_story_requests_" + std::to_string(::getpid()) + ".jsonl");
};

TEST_F(StoryRequests, ReadsContextsAndPerSentenceKeywords) {
  const std::vector<StoryRequest> r =
      read_story_requests(write("{\"context\": \"Tom was hungry.\", \"keywords\": [null, [\"bakery\", \"fresh bread\"]]}\n"
                                "\n"
                                "{\"context\": \"Ann woke up.\"}\n"));
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].first_sentence, "Tom was hungry.");
  ASSERT_EQ(r[0].keywords.size(), 2u);
  EXPECT_FALSE(r[0].keywords[0].has_value());
  EXPECT_EQ(*r[0].keywords[1], (Strings{"bakery", "fresh bread"}));
  EXPECT_EQ(r[1].first_sentence, "Ann woke up.");
  EXPECT_TRUE(r[1].keywords.empty());
}

TEST_F(StoryRequests, BadLinesNameTheFileAndLine) {
  auto message = [&](const std::string& text) {
    try {
      read_story_requests(write(text));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string where = path_.string() + ":2";
  const std::string ok = "{\"context\": \"A.\"}\n";
  for (const auto& [line, rule] : std::vector<std::pair<std::string, std::string>>{
           {"not json", "not a JSON object"},
           {"[1, 2]", "not a JSON object"},
           {"{\"keywords\": []}", "needs \"context\""},
           {"{\"context\": \"  \"}", "needs \"context\""},
           {"{\"context\": \"A.\", \"keywords\": \"bread\"}", "must be a list"},
           {"{\"context\": \"A.\", \"keywords\": [[]]}", "null or a non-empty list of strings"},
           {"{\"context\": \"A.\", \"keywords\": [[1]]}", "null or a non-empty list of strings"}}) {
    const std::string m = message(ok + line + "\n");
    EXPECT_NE(m.find(where), std::string::npos) << m;
    EXPECT_NE(m.find(rule), std::string::npos) << m;
  }
  EXPECT_NE(message("\n\n").find("no story"), std::string::npos);
  EXPECT_NE(message("").find("no story"), std::string::npos);
  try {
    read_story_requests("/nonexistent/stories.jsonl");
    ADD_FAILURE() << "a missing file was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/stories.jsonl: cannot open"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera::tasks
