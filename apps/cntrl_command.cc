// `tessera cntrl preprocess --stories ROCStories.csv --knowledge-base conceptnet.csv --output-prefix P`:
// the training data of MEGATRON-CNTRL's keyword predictor, knowledge ranker and conditional generator
// (eval/cntrl.h), as P_keywords.jsonl, P_ranker.jsonl and P_generator.jsonl.
#include <nlohmann/json.hpp>

#include <iostream>

#include "apps/command_line.h"
#include "apps/commands.h"
#include "core/file_io.h"
#include "eval/cntrl.h"

namespace tessera::apps {

int cntrl_command(const std::vector<std::string>& args) {
  TESSERA_CHECK(!args.empty() && args[0] == "preprocess", "tessera cntrl: expected `tessera cntrl preprocess ...`");
  std::string stories, knowledge_base, prefix;
  eval::CntrlOptions o;
  CLI::App app{"tessera cntrl preprocess: MEGATRON-CNTRL's training data", "tessera cntrl preprocess"};
  app.option_defaults()->always_capture_default();
  app.add_option("--stories", stories, "ROCStories CSV (storyid, storytitle, sentence1..sentence5)")->required();
  app.add_option("--knowledge-base", knowledge_base, "ConceptNet assertions CSV (tab-separated)")->required();
  app.add_option("--output-prefix", prefix, "Writes PREFIX_keywords.jsonl, PREFIX_ranker.jsonl, PREFIX_generator.jsonl")
      ->required();
  app.add_option("--keywords-per-sentence", o.keywords_per_sentence, "RAKE keywords of each sentence")
      ->check(CLI::PositiveNumber);
  app.add_option("--knowledge-per-keyword", o.knowledge_per_keyword, "Knowledge sentences retrieved per keyword")
      ->check(CLI::PositiveNumber);
  app.add_option("--top-n", o.top_n, "Knowledge sentences given to the generator")->check(CLI::PositiveNumber);
  app.add_option("--positives", o.positives, "Ranker pseudo-labels set to 1 (the most similar to the sentence)")
      ->check(CLI::NonNegativeNumber);
  if (!parse_command_line(app, {args.begin() + 1, args.end()}, "cntrl preprocess")) return 0;

  const eval::KnowledgeBase kb = eval::KnowledgeBase::read_conceptnet(knowledge_base);
  const auto story_sentences = eval::read_rocstories(stories);
  std::string keywords, ranker, generator;
  int64_t with_knowledge = 0;
  const std::vector<eval::CntrlExample> examples = eval::cntrl_examples(story_sentences, kb, o);
  for (const eval::CntrlExample& e : examples) {
    keywords += nlohmann::json{{"context", e.context}, {"keywords", e.keywords}}.dump() + "\n";
    ranker += nlohmann::json{{"context", e.context}, {"knowledge", e.knowledge}, {"pseudo_labels", e.pseudo_labels}}.dump() + "\n";
    generator += nlohmann::json{{"context", e.context}, {"knowledge_topN", e.knowledge_top}, {"target", e.target}}.dump() + "\n";
    with_knowledge += e.knowledge.empty() ? 0 : 1;
  }
  write_file_atomically(prefix + "_keywords.jsonl", keywords);
  write_file_atomically(prefix + "_ranker.jsonl", ranker);
  write_file_atomically(prefix + "_generator.jsonl", generator);
  std::cout << " > " << story_sentences.size() << " stories, " << kb.size() << " triples: " << examples.size()
            << " sentences, " << with_knowledge << " with knowledge, to " << prefix
            << "_{keywords,ranker,generator}.jsonl" << std::endl;
  return 0;
}

}  // namespace tessera::apps
