#include "tasks/msdp.h"

#include <gtest/gtest.h>

#include "core/check.h"

namespace tessera::tasks {
namespace {

using nlohmann::json;

TEST(Msdp, ProcessesWizardOfWikipediaAsMegatron) {
  const json raw = json::parse(R"([
    {"chosen_topic": "Cats", "dialog": [
      {"speaker": "0_Wizard", "text": "I love cats"},
      {"speaker": "1_Apprentice", "text": "Me too!"},
      {"speaker": "0_Wizard", "text": "Cats sleep a lot", "checked_sentence": {"Cats_0": "Cats sleep 16 hours a day."},
       "checked_passage": {"Cats": "Cat behaviour"}},
      {"speaker": "1_Apprentice", "text": "Really?"},
      {"speaker": "0_Wizard", "text": "Yes", "checked_sentence": {}, "checked_passage": {}}]},
    {"chosen_topic": "Jazz", "dialog": [
      {"speaker": "1_Apprentice", "text": "Do you like jazz?"},
      {"speaker": "0_Wizard", "text": "Yes, it is great", "checked_sentence": {}, "checked_passage": {}}]}])");
  std::vector<std::string> lines;
  for (const DialogueSample& s : process_wow(raw)) lines.push_back(s.line());
  EXPECT_EQ(lines, (std::vector<std::string>{
                       "Cat behaviour\tI love cats. [SEP] Me too!\tCats sleep 16 hours a day.\tCats sleep a lot.",
                       "Cats\tI love cats. [SEP] Me too! [SEP] Cats sleep a lot. [SEP] Really?\tno_passages_used\tYes.",
                       "Jazz\tDo you like jazz?\tno_passages_used\tYes, it is great."}));
  EXPECT_THROW(process_wow(json::object()), Error);
  EXPECT_THROW(process_wow(json::parse(R"([{"chosen_topic": "x", "dialog": [{"speaker": "a", "text": "x"},
                                           {"speaker": "2_Narrator", "text": "y"}]}])")),
               Error);
}

TEST(Msdp, BuildsBothStagesInputsByteForByte) {
  const DialogueSample s{"Cats", "Hello [SEP] Do cats sleep much?", "Cats sleep 16 hours.", "They do."};
  EXPECT_EQ(knowledge_generation_input(s, {" ( a ) T => k ", "( b ) U => j"}),
            "( a ) T => k \n( b ) U => j \n( Do cats sleep much? ) Cats =>");
  EXPECT_EQ(response_generation_input(s, {"Topic: T. User says: u We know that: k System replies: r"}),
            "Topic: T. User says: u We know that: k System replies: r \n"
            "Topic: Cats. User says: Do cats sleep much ? We know that: Cats sleep 16 hours . System replies:");
  EXPECT_EQ(msdp_output(" Cats sleep a lot. \nTopic: next"), "Cats sleep a lot.");
  EXPECT_EQ(msdp_output("no newline "), "no newline");
}

TEST(Msdp, ResponseExamplesCopyTheirKnowledge) {
  const std::string knowledge = "the cat is a small domesticated carnivorous mammal of the family";  // 11 tokens
  // 11 of 15 response tokens (73%) in one run of 11, all of the knowledge.
  EXPECT_TRUE(response_copies_knowledge(knowledge, "well , " + knowledge + " you see"));
  // All of the response copies the knowledge: more than 90%.
  EXPECT_FALSE(response_copies_knowledge(knowledge, knowledge));
  // Runs shorter than 10 tokens do not count.
  EXPECT_FALSE(response_copies_knowledge(knowledge, "the cat is a small domesticated carnivorous mammal ok of the family"));
  // 11 of 15 knowledge tokens copied: less than 80% of the knowledge.
  EXPECT_FALSE(response_copies_knowledge(knowledge + " felidae and it purrs", "well , " + knowledge + " you see"));

  const std::vector<DialogueSample> train = {
      {"Cat", "Tell me about cats", knowledge, "well , " + knowledge + " you see"},
      {"Dog", "And dogs?", "no_passages_used", "no idea"},
      {"Cat", "More?", knowledge, knowledge}};
  const std::vector<std::string> examples = select_response_prompts(train, 1234);
  ASSERT_EQ(examples.size(), 1u);
  EXPECT_EQ(examples[0], "Topic: Cat. User says: Tell me about cats We know that: " + knowledge +
                             " System replies: well , " + knowledge + " you see");
}

std::vector<DialogueSample> training_turns() {
  return {{"Cats", "Hi [SEP] do cats sleep all day", "Cats sleep a lot.", "r"},
          {"Cats", "Hi [SEP] what do cats eat", "Cats eat meat.", "r"},
          {"Cats", "Hi [SEP] are cats friendly pets", "Cats can be friendly.", "r"},
          {"Dogs", "do dogs bark loudly", "Dogs bark.", "r"},
          {"Fish", "can fish sleep", "Fish rest.", "r"},
          {"Owls", "owls hunt at night", "Owls hunt mice.", "r"},
          {"Owls", "it is late", "It is an owl.", "r"},  // unseen topics drop knowledge starting "It"
          {"Cows", "cows", "no_passages_used", "r"}};
}

TEST(Msdp, SeenTopicsTakeTheirMostSimilarTurnsMostSimilarLast) {
  const std::vector<DialogueSample> test = {{"Cats", "Hello [SEP] do cats sleep at night", "k", "r"}};
  const std::vector<KnowledgePrompt> p = select_knowledge_prompts(test, training_turns(), MsdpDataType::WowSeen, false, 2);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].key, "Cats do cats sleep at night");
  ASSERT_EQ(p[0].examples.size(), 2u);
  EXPECT_EQ(p[0].examples[1], "( do cats sleep all day ) Cats => Cats sleep a lot.");  // the closest, last
}

TEST(Msdp, UnseenTopicsTakeDistinctTopicsInTheCodesOrderOrTheMostSimilar) {
  const std::vector<DialogueSample> test = {{"Birds", "can birds sleep", "k", "r"}};
  const auto train = training_turns();
  // wow_seen keeps every knowledge (no topic-in-knowledge filter): Cats, Dogs, Fish and Owls remain.
  const auto least = select_knowledge_prompts(test, train, MsdpDataType::WowSeen, false, 2);
  const auto most = select_knowledge_prompts(test, train, MsdpDataType::WowSeen, true, 2);
  ASSERT_EQ(least[0].examples.size(), 2u);
  ASSERT_EQ(most[0].examples.size(), 2u);
  EXPECT_EQ(most[0].examples[1], "( can fish sleep ) Fish => Fish rest.");  // shares "can" and "sleep"
  for (const std::string& e : least[0].examples) EXPECT_EQ(e.find("Fish"), std::string::npos) << e;
  // Four topics when asked for more: one example each.
  const auto all = select_knowledge_prompts(test, train, MsdpDataType::WowSeen, true, 10);
  EXPECT_EQ(all[0].examples.size(), 4u);
  EXPECT_THROW(parse_msdp_data_type("wow"), Error);
}

TEST(Msdp, PrepareInputPutsTheGeneratedKnowledgeIn) {
  const std::vector<DialogueSample> test = {{"T", "c", "gold", "r"}};
  // Stripped first, then the end-of-text marker removed (as Megatron, which leaves the space before it).
  EXPECT_EQ(with_generated_knowledge(test, {" made up <|endoftext|>"})[0].line(), "T\tc\tmade up \tr");
  EXPECT_THROW(with_generated_knowledge(test, {}), Error);
}

}  // namespace
}  // namespace tessera::tasks
