#include "tasks/cntrl_story.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <numeric>

#include "core/check.h"
#include "core/file_io.h"
#include "tasks/cntrl_dataset.h"

namespace tessera::tasks {
namespace {

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// " w1 w2 ... ": the lower-cased runs of letters and digits, each between spaces.
std::string spaced_words(const std::string& text) {
  std::string out = " ";
  bool in_word = false;
  for (char c : text) {
    const bool word = std::isalnum(static_cast<unsigned char>(c)) != 0;
    if (word) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    else if (in_word) out += ' ';
    in_word = word;
  }
  if (in_word) out += ' ';
  return out;
}

}  // namespace

std::vector<StoryRequest> read_story_requests(const std::string& path) {
  std::ifstream in = open_input_file(path, "--input=" + path);
  std::vector<StoryRequest> out;
  int64_t number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (trim(line).empty()) continue;
    const std::string where = path + ":" + std::to_string(number);
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    TESSERA_CHECK(!j.is_discarded() && j.is_object(), where, ": not a JSON object");
    TESSERA_CHECK(j.contains("context") && j["context"].is_string() && !trim(j["context"].get<std::string>()).empty(), where,
                  ": needs \"context\", the story's first sentence");
    StoryRequest r{j["context"].get<std::string>(), {}};
    if (j.contains("keywords")) {
      const nlohmann::json& k = j["keywords"];
      TESSERA_CHECK(k.is_array(), where, ": \"keywords\" must be a list, one entry per new sentence");
      for (const nlohmann::json& step : k) {
        if (step.is_null()) {
          r.keywords.emplace_back();
          continue;
        }
        TESSERA_CHECK(step.is_array() && !step.empty() &&
                          std::all_of(step.begin(), step.end(), [](const nlohmann::json& w) { return w.is_string(); }),
                      where, ": each entry of \"keywords\" must be null or a non-empty list of strings, not ", step.dump());
        r.keywords.emplace_back(step.get<std::vector<std::string>>());
      }
    }
    out.push_back(std::move(r));
  }
  TESSERA_CHECK(!out.empty(), "--input=", path, ": no story (an empty file)");
  return out;
}

std::string Story::text() const {
  std::string out = first_sentence;
  for (const StorySentence& s : sentences) out.append(" ").append(s.sentence);
  return out;
}

StoryTeller::StoryTeller(const infer::LoadedModel& keyword_model, const infer::LoadedModel& generator_model,
                         const KnowledgeRanker& ranker, const KnowledgeBase& kb, const StoryOptions& options)
    : keyword_model_(keyword_model), generator_model_(generator_model), ranker_(ranker), kb_(kb), options_(options) {
  TESSERA_CHECK(options.sentences > 0 && options.keywords_per_sentence > 0 && options.knowledge_per_keyword > 0 &&
                    options.top_n > 0 && options.keyword_tokens > 0 && options.sentence_tokens > 0,
                "MEGATRON-CNTRL story generation: counts must be positive");
}

std::vector<std::string> StoryTeller::continue_all(const infer::LoadedModel& model,
                                                   const std::vector<std::string>& prompts, int64_t tokens,
                                                   uint64_t seed) const {
  const data::Tokenizer& tokenizer = model.tokenizer();
  infer::GenerationOptions o;
  o.sampling = options_.sampling;
  o.sampling.tokens_to_generate = tokens;
  o.sampling.eod = tokenizer.eod();
  o.sampling.random_seed = seed;
  o.stop_on_eol = true;
  std::vector<std::vector<int32_t>> ids;
  for (const std::string& p : prompts) {
    ids.push_back(tokenizer.encode(p));
    // A prompt longer than the model's window keeps its end (the latest sentences).
    const auto keep = static_cast<size_t>(std::max<int64_t>(1, model.config().seq_length - tokens));
    if (ids.back().size() > keep) ids.back().erase(ids.back().begin(), ids.back().end() - static_cast<std::ptrdiff_t>(keep));
  }
  const std::vector<infer::Generation> out =
      infer::generate(model.runner(), ids, o, &tokenizer, {}, options_.max_batch_size);
  std::vector<std::string> texts;
  for (const infer::Generation& g : out) {
    std::span<const int32_t> all(g.tokens);
    std::span<const int32_t> generated = all.subspan(static_cast<size_t>(g.prompt_length));
    if (!generated.empty() && generated.back() == tokenizer.eod()) generated = generated.first(generated.size() - 1);
    std::string text = infer::continuation_text(tokenizer, all.first(static_cast<size_t>(g.prompt_length)), generated);
    texts.push_back(trim(text.substr(0, text.find('\n'))));
  }
  return texts;
}

std::vector<Story> StoryTeller::tell(const std::vector<StoryRequest>& requests) const {
  std::vector<Story> stories(requests.size());
  for (size_t s = 0; s < requests.size(); ++s) stories[s].first_sentence = trim(requests[s].first_sentence);
  for (int64_t step = 0; step < options_.sentences; ++step) {
    // Keywords: the user's, or the predictor's.
    std::vector<size_t> predict;
    std::vector<std::string> prompts;
    std::vector<StorySentence> next(stories.size());
    for (size_t s = 0; s < stories.size(); ++s) {
      const auto& given = requests[s].keywords;
      if (step < static_cast<int64_t>(given.size()) && given[static_cast<size_t>(step)]) {
        next[s].keywords = *given[static_cast<size_t>(step)];
        next[s].keywords_given = true;
      } else {
        predict.push_back(s);
        prompts.push_back(tasks::cntrl_keyword_prompt(stories[s].text()));
      }
    }
    if (!prompts.empty()) {
      const std::vector<std::string> predicted =
          continue_all(keyword_model_, prompts, options_.keyword_tokens, options_.sampling.random_seed + 2 * step);
      for (size_t i = 0; i < predict.size(); ++i) {
        std::vector<std::string> k = tasks::parse_cntrl_keywords(predicted[i]);
        if (static_cast<int64_t>(k.size()) > options_.keywords_per_sentence)
          k.resize(static_cast<size_t>(options_.keywords_per_sentence));
        next[predict[i]].keywords = std::move(k);
      }
    }
    // Knowledge: retrieved for the keywords, ranked against the story so far.
    prompts.clear();
    for (size_t s = 0; s < stories.size(); ++s) {
      StorySentence& n = next[s];
      n.knowledge = kb_.retrieve(n.keywords, options_.knowledge_per_keyword);
      n.scores = ranker_.scores(stories[s].text(), n.knowledge);
      std::vector<size_t> order(n.knowledge.size());
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return n.scores[a] > n.scores[b]; });
      for (size_t r = 0; r < order.size() && static_cast<int64_t>(r) < options_.top_n; ++r)
        n.ranked.push_back(n.knowledge[order[r]]);
      prompts.push_back(tasks::cntrl_generator_prompt(stories[s].text(), n.ranked));
    }
    // The next sentence.
    const std::vector<std::string> sentences = continue_all(generator_model_, prompts, options_.sentence_tokens,
                                                            options_.sampling.random_seed + 2 * step + 1);
    for (size_t s = 0; s < stories.size(); ++s) {
      next[s].sentence = sentences[s];
      stories[s].sentences.push_back(std::move(next[s]));
    }
  }
  return stories;
}

bool mentions(const std::string& sentence, const std::string& keyword, const KnowledgeBase& kb) {
  const std::string words = spaced_words(sentence);
  std::vector<std::string> concepts = kb.neighbours(keyword);
  concepts.push_back(keyword);
  for (const std::string& c : concepts) {
    const std::string phrase = spaced_words(c);
    if (phrase.size() > 1 && words.find(phrase) != std::string::npos) return true;
  }
  return false;
}

Controllability controllability(const std::vector<Story>& stories, const std::vector<StoryRequest>& requests,
                                const KnowledgeBase& kb) {
  TESSERA_CHECK(stories.size() == requests.size(), "controllability: ", stories.size(), " stories for ",
                requests.size(), " requests");
  Controllability c;
  for (size_t s = 0; s < stories.size(); ++s)
    for (size_t i = 0; i < stories[s].sentences.size() && i < requests[s].keywords.size(); ++i) {
      const auto& given = requests[s].keywords[i];
      if (!given) continue;
      ++c.controlled;
      const std::string& sentence = stories[s].sentences[i].sentence;
      c.hits += std::any_of(given->begin(), given->end(), [&](const std::string& k) { return mentions(sentence, k, kb); })
                    ? 1
                    : 0;
    }
  return c;
}

}  // namespace tessera::tasks
