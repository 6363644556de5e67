// MEGATRON-CNTRL (Xu et al. 2020):
// `tessera cntrl preprocess --stories ROCStories.csv --knowledge-base conceptnet.csv --output-prefix P`:
//   the training data of the keyword predictor, knowledge ranker and conditional generator
//   (tasks/cntrl.h), as P_keywords.jsonl, P_ranker.jsonl and P_generator.jsonl;
// `tessera cntrl generate --keyword-load K --ranker-load R --generator-load G --knowledge-base kb.csv
//   --input stories.jsonl`: stories told sentence by sentence with the three fine-tuned models
//   (tasks/cntrl_story.h), each stage's output shown, and the controllability of given keywords.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <iostream>

#include "apps/command_line.h"
#include "apps/commands.h"
#include "apps/inference_flags.h"
#include "core/file_io.h"
#include "tasks/cntrl.h"
#include "tasks/cntrl_story.h"

namespace tessera::apps {

namespace {

std::string joined(const std::vector<std::string>& parts, const char* separator) {
  std::string out;
  for (const std::string& p : parts) out.append(out.empty() ? "" : separator).append(p);
  return out;
}

void print_story(size_t index, const tasks::Story& story) {
  std::cout << "story " << index << ": " << story.first_sentence << "\n";
  for (size_t i = 0; i < story.sentences.size(); ++i) {
    const tasks::StorySentence& s = story.sentences[i];
    std::cout << "  sentence " << i + 2 << "\n    keywords (" << (s.keywords_given ? "given" : "predicted")
              << "): " << joined(s.keywords, ", ") << "\n    retrieved: " << s.knowledge.size() << " sentences\n";
    for (size_t r = 0; r < s.ranked.size(); ++r) {
      const size_t at = static_cast<size_t>(std::find(s.knowledge.begin(), s.knowledge.end(), s.ranked[r]) - s.knowledge.begin());
      std::cout << "    ranked " << r + 1 << " (" << s.scores[at] << "): " << s.ranked[r] << "\n";
    }
    std::cout << "    sentence: " << s.sentence << "\n";
  }
  std::cout << "  story: " << story.text() << std::endl;
}

nlohmann::json story_json(const tasks::Story& story) {
  nlohmann::json steps = nlohmann::json::array();
  for (const tasks::StorySentence& s : story.sentences)
    steps.push_back({{"keywords", s.keywords}, {"keywords_given", s.keywords_given}, {"knowledge", s.knowledge},
                     {"scores", s.scores}, {"ranked", s.ranked}, {"sentence", s.sentence}});
  return {{"context", story.first_sentence}, {"sentences", steps}, {"story", story.text()}};
}

int cntrl_generate(const std::vector<std::string>& args) {
  std::string keyword_load, ranker_load, generator_load, knowledge_base, input, output;
  bool predict_keywords = false;
  tasks::StoryOptions o;
  o.sampling.top_k = 1;  // greedy unless asked
  CLI::App app{"tessera cntrl generate: MEGATRON-CNTRL's story generation", "tessera cntrl generate"};
  app.option_defaults()->always_capture_default();
  app.add_option("--keyword-load", keyword_load, "The keyword predictor (finetune --task CNTRL-KEYWORDS --save)")
      ->required();
  app.add_option("--ranker-load", ranker_load, "The knowledge ranker (finetune --task CNTRL-RANKER --save)")->required();
  app.add_option("--generator-load", generator_load, "The conditional generator (finetune --task CNTRL-GENERATOR --save)")
      ->required();
  app.add_option("--knowledge-base", knowledge_base, "ConceptNet assertions CSV (tab-separated)")->required();
  app.add_option("--input", input, "JSONL: {\"context\": first sentence, \"keywords\": [[...] or null, ...]}")->required();
  app.add_option("--output", output, "Write the stories with each stage's output here (JSONL)");
  app.add_option("--num-sentences", o.sentences, "Sentences to add to each story")->check(kPositive);
  app.add_option("--keywords-per-sentence", o.keywords_per_sentence, "Predicted keywords kept per sentence")
      ->check(kPositive);
  app.add_option("--knowledge-per-keyword", o.knowledge_per_keyword, "Knowledge sentences retrieved per keyword")
      ->check(kPositive);
  app.add_option("--top-n", o.top_n, "Ranked knowledge sentences given to the generator")->check(kPositive);
  app.add_option("--keyword-tokens", o.keyword_tokens, "Tokens the keyword predictor may generate")
      ->check(kPositive);
  app.add_option("--sentence-tokens", o.sentence_tokens, "Tokens the generator may generate per sentence")
      ->check(kPositive);
  app.add_option("--temperature", o.sampling.temperature, "Sampling temperature (0: greedy)");
  app.add_option("--top-k", o.sampling.top_k, "Sample from the k most likely tokens (1: greedy)");
  app.add_option("--top-p", o.sampling.top_p, "Sample from the smallest set holding this probability");
  app.add_option("--random-seed", o.sampling.random_seed, "Seed of the sampling")->check(kNonNegativeInteger);
  app.add_option("--micro-batch-size", o.max_batch_size, "Stories decoded together")->check(kPositive);
  app.add_flag("--predict-keywords", predict_keywords,
               "Predict every sentence's keywords, ignoring the input's (the baseline of the controllability)");
  return run_on_every_rank(app, {args.begin() + 1, args.end()}, "cntrl generate", [&](comm::ProcessGroup& world) {
    TESSERA_CHECK(world.size() == 1, "tessera cntrl generate runs in one process, not ", world.size());
    infer::validate(o.sampling);
    const std::vector<tasks::StoryRequest> requests = tasks::read_story_requests(input);
    const tasks::KnowledgeBase kb = tasks::KnowledgeBase::read_conceptnet(knowledge_base);
    infer::LoadOptions keyword_options, generator_options;
    keyword_options.load = keyword_load;
    generator_options.load = generator_load;
    const infer::LoadedModel keyword_model(keyword_options, world), generator_model(generator_options, world);
    const tasks::KnowledgeRanker ranker(ranker_load);
    std::vector<tasks::StoryRequest> told = requests;
    if (predict_keywords)
      for (tasks::StoryRequest& r : told) r.keywords.clear();
    const std::vector<tasks::Story> stories = tasks::StoryTeller(keyword_model, generator_model, ranker, kb, o).tell(told);
    std::string lines;
    for (size_t i = 0; i < stories.size(); ++i) {
      print_story(i, stories[i]);
      lines += story_json(stories[i]).dump() + "\n";
    }
    if (!output.empty()) write_file_atomically(output, lines);
    const tasks::Controllability c = tasks::controllability(stories, requests, kb);
    if (c.controlled > 0) {
      std::cout << " > controllability" << (predict_keywords ? " (baseline: keywords predicted)" : "") << ": "
                << c.hits << " / " << c.controlled << " = " << 100.0 * static_cast<double>(c.hits) / static_cast<double>(c.controlled)
                << " % of the sentences with given keywords mention one of them or a knowledge-base neighbour"
                << std::endl;
    }
    std::cout << " > " << stories.size() << " stories of " << o.sentences + 1 << " sentences"
              << (output.empty() ? "" : ", to " + output) << std::endl;
  });
}

int cntrl_preprocess(const std::vector<std::string>& args) {
  std::string stories, knowledge_base, prefix;
  tasks::CntrlOptions o;
  CLI::App app{"tessera cntrl preprocess: MEGATRON-CNTRL's training data", "tessera cntrl preprocess"};
  app.option_defaults()->always_capture_default();
  app.add_option("--stories", stories, "ROCStories CSV (storyid, storytitle, sentence1..sentence5)")->required();
  app.add_option("--knowledge-base", knowledge_base, "ConceptNet assertions CSV (tab-separated)")->required();
  app.add_option("--output-prefix", prefix, "Writes PREFIX_keywords.jsonl, PREFIX_ranker.jsonl, PREFIX_generator.jsonl")
      ->required();
  app.add_option("--keywords-per-sentence", o.keywords_per_sentence, "RAKE keywords of each sentence")
      ->check(kPositive);
  app.add_option("--knowledge-per-keyword", o.knowledge_per_keyword, "Knowledge sentences retrieved per keyword")
      ->check(kPositive);
  app.add_option("--top-n", o.top_n, "Knowledge sentences given to the generator")->check(kPositive);
  app.add_option("--positives", o.positives, "Ranker pseudo-labels set to 1 (the most similar to the sentence)")
      ->check(CLI::NonNegativeNumber);
  if (!parse_command_line(app, {args.begin() + 1, args.end()}, "cntrl preprocess")) return 0;

  const tasks::KnowledgeBase kb = tasks::KnowledgeBase::read_conceptnet(knowledge_base);
  const auto story_sentences = tasks::read_rocstories(stories);
  std::string keywords, ranker, generator;
  int64_t with_knowledge = 0;
  const std::vector<tasks::CntrlExample> examples = tasks::cntrl_examples(story_sentences, kb, o);
  for (const tasks::CntrlExample& e : examples) {
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

}  // namespace

int cntrl_command(const std::vector<std::string>& args) {
  constexpr const char* kUsage = "usage: tessera cntrl preprocess ... (the training data) or tessera cntrl generate ... "
                                 "(the stories); tessera cntrl preprocess --help and tessera cntrl generate --help list "
                                 "their flags";
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    std::cout << kUsage << std::endl;
    return 0;
  }
  TESSERA_CHECK(!args.empty(), kUsage);
  TESSERA_CHECK(args[0] == "preprocess" || args[0] == "generate", "tessera cntrl: unknown subcommand '", args[0], "'; ",
                kUsage);
  return args[0] == "preprocess" ? cntrl_preprocess(args) : cntrl_generate(args);
}

}  // namespace tessera::apps
