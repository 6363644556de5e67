#include "tasks/msdp.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <sstream>

#include "core/check.h"
#include "core/file_io.h"
#include "eval/python_regex.h"
#include "tasks/dialogue_f1.h"
#include "tasks/tfidf.h"
#include "tasks/word_tokenize.h"

namespace tessera::tasks {
namespace {

std::vector<std::string> split(const std::string& s, const std::string& separator) {
  std::vector<std::string> out;
  size_t start = 0, at;
  while ((at = s.find(separator, start)) != std::string::npos) {
    out.push_back(s.substr(start, at - start));
    start = at + separator.size();
  }
  out.push_back(s.substr(start));
  return out;
}

std::string strip(const std::string& s) {
  const char* space = " \t\n\r\f\v";
  const size_t begin = s.find_first_not_of(space);
  return begin == std::string::npos ? "" : s.substr(begin, s.find_last_not_of(space) - begin + 1);
}

bool ends_sentence(const std::string& s) {
  return !s.empty() && (s.back() == '?' || s.back() == '.' || s.back() == '!');
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The values of a JSON object in order ({"title": "sentence"}), or nothing for another type.
std::vector<std::string> string_values(const nlohmann::json& object) {
  std::vector<std::string> out;
  if (object.is_object())
    for (const auto& [key, value] : object.items()) out.push_back(value.get<std::string>());
  return out;
}

// The last three turns as one dialogue text, "( topic ) " first unless wow_seen (get_database).
std::string dialogue_text(const std::vector<std::string>& turns, const std::string& topic, bool with_topic) {
  std::string out = with_topic ? "( " + topic + " ) " : "";
  const size_t first = turns.size() > 3 ? turns.size() - 3 : 0;
  for (size_t i = first; i < turns.size(); ++i) out += (i == first ? "" : " ") + turns[i];
  return out;
}

}  // namespace

std::vector<std::string> DialogueSample::turns() const { return split(context, " [SEP] "); }

std::string DialogueSample::line() const { return topic + "\t" + context + "\t" + knowledge + "\t" + response; }

std::vector<DialogueSample> read_processed(const std::string& path) {
  std::ifstream in = open_input_file(path, path);
  std::vector<DialogueSample> out;
  int64_t number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    const std::vector<std::string> fields = split(strip(line), "\t");
    TESSERA_CHECK(fields.size() >= 4, path, ":", number, ": ", fields.size(),
                  " tab-separated fields, expected topic, context, knowledge and response");
    out.push_back({fields[0], fields[1], fields[2], fields[3]});
  }
  return out;
}

std::vector<DialogueSample> process_wow(const nlohmann::json& dialogues) {
  TESSERA_CHECK(dialogues.is_array(), "Wizard of Wikipedia data: expected a JSON list of dialogues");
  std::vector<DialogueSample> out;
  for (const nlohmann::json& sample : dialogues) {
    std::vector<std::string> history;
    const nlohmann::json& dialog = sample.at("dialog");
    for (size_t j = 0; j < dialog.size(); ++j) {
      const nlohmann::json& turn = dialog[j];
      std::string text = turn.at("text").get<std::string>();
      if (!ends_sentence(text)) text += ".";
      if (j == 0) {
        history.push_back(text);
        continue;
      }
      const std::string speaker = lower(turn.at("speaker").get<std::string>());
      if (speaker.find("wizard") == std::string::npos) {
        TESSERA_CHECK(speaker.find("apprentice") != std::string::npos, "Wizard of Wikipedia data: speaker '",
                      speaker, "' is neither a wizard nor an apprentice");
        history.push_back(text);
        continue;
      }
      const std::vector<std::string> sentence = string_values(turn.value("checked_sentence", nlohmann::json()));
      const std::vector<std::string> passage = string_values(turn.value("checked_passage", nlohmann::json()));
      TESSERA_CHECK(sentence.size() <= 1, "Wizard of Wikipedia data: a turn with ", sentence.size(),
                    " checked sentences");
      DialogueSample s;
      s.knowledge = sentence.empty() ? "no_passages_used" : sentence[0];
      const std::string checked_passage = passage.size() == 1 ? passage[0] : "no_passages_used";
      s.topic = checked_passage != "no_passages_used" ? checked_passage : sample.at("chosen_topic").get<std::string>();
      for (size_t h = 0; h < history.size(); ++h) s.context += (h ? " [SEP] " : "") + history[h];
      s.response = text;
      history.push_back(text);
      out.push_back(std::move(s));
    }
  }
  return out;
}

MsdpDataType parse_msdp_data_type(const std::string& name) {
  if (name == "wow_seen") return MsdpDataType::WowSeen;
  if (name == "wow_unseen") return MsdpDataType::WowUnseen;
  if (name == "woi") return MsdpDataType::Woi;
  throw Error(str_cat("--data_type=", name, ": expected wow_seen, wow_unseen or woi"));
}

std::vector<KnowledgePrompt> select_knowledge_prompts(const std::vector<DialogueSample>& test,
                                                      const std::vector<DialogueSample>& train, MsdpDataType type,
                                                      bool most_similar_unseen, int64_t examples) {
  TESSERA_CHECK(examples > 0, "knowledge prompts: ", examples, " examples");
  const bool seen = type == MsdpDataType::WowSeen;
  std::set<std::string> test_topics;
  for (const DialogueSample& s : test) test_topics.insert(s.topic);
  // The training examples (get_database): by topic for the test's topics, and all of them.
  struct Example {
    std::string topic, dialogue, instance;
  };
  std::map<std::string, std::vector<size_t>> by_topic;
  std::vector<Example> all;
  for (const DialogueSample& s : train) {
    const std::string& k = s.knowledge;
    if (k == "no_passages_used") continue;
    if (!seen && (k.find('(') != std::string::npos || k.find(')') != std::string::npos)) continue;
    if (!seen && k.find(s.topic) == std::string::npos) continue;
    const std::vector<std::string> turns = s.turns();
    Example e{s.topic, dialogue_text(turns, s.topic, !seen), "( " + turns.back() + " ) " + s.topic + " => " + k};
    if (test_topics.count(s.topic)) {
      by_topic[s.topic].push_back(all.size());
    } else {
      std::istringstream words(k);
      int64_t n = 0;
      for (std::string w; words >> w;) ++n;
      if (n > 20) continue;
      if (k.rfind("It", 0) == 0 || k.rfind("it", 0) == 0 || k.rfind("This", 0) == 0 || k.rfind("this", 0) == 0)
        continue;
    }
    all.push_back(std::move(e));
  }
  std::vector<std::string> corpus;
  for (const Example& e : all) corpus.push_back(e.dialogue);
  const TfIdf embed(corpus);
  std::vector<TfIdf::Vector> vectors;
  for (const Example& e : all) vectors.push_back(embed(e.dialogue));

  std::vector<KnowledgePrompt> out;
  for (const DialogueSample& s : test) {
    const std::vector<std::string> turns = s.turns();
    // Megatron compares the data type with "seen" here, which no type equals: the topic always leads.
    const TfIdf::Vector query = embed(dialogue_text(turns, s.topic, true));
    KnowledgePrompt p{s.topic + " " + turns.back(), {}};
    auto it = by_topic.find(s.topic);
    if (it == by_topic.end()) {
      std::vector<size_t> order(all.size());
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        const double sa = TfIdf::cosine(vectors[a], query), sb = TfIdf::cosine(vectors[b], query);
        return most_similar_unseen ? sa > sb : sa < sb;
      });
      std::set<std::string> topics;
      for (size_t i : order) {
        if (static_cast<int64_t>(p.examples.size()) == examples) break;
        if (topics.insert(all[i].topic).second) p.examples.push_back(all[i].instance);
      }
    } else {
      std::vector<size_t> order = it->second;
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return TfIdf::cosine(vectors[a], query) > TfIdf::cosine(vectors[b], query);
      });
      order.resize(std::min<size_t>(order.size(), static_cast<size_t>(examples)));
      for (size_t i : order) p.examples.push_back(all[i].instance);
    }
    std::reverse(p.examples.begin(), p.examples.end());  // the most similar last, next to the query
    out.push_back(std::move(p));
  }
  return out;
}

bool response_copies_knowledge(const std::string& knowledge, const std::string& response) {
  const std::vector<std::string> k = word_tokenize(knowledge), r = word_tokenize(response);
  const std::set<std::string> in_knowledge(k.begin(), k.end());
  int64_t overlap = 0, run = 0;
  for (const std::string& token : r) {
    if (in_knowledge.count(token)) {
      ++run;
      continue;
    }
    if (run >= 10) overlap += run;
    run = 0;
  }
  if (run >= 10) overlap += run;
  const double n = static_cast<double>(overlap);
  const double response_length = static_cast<double>(r.size()), knowledge_length = static_cast<double>(k.size());
  return !(n > response_length * 0.9 || n < response_length * 0.6) && n >= knowledge_length * 0.8;
}

std::vector<std::string> select_response_prompts(const std::vector<DialogueSample>& train, uint64_t seed,
                                                 int64_t count) {
  std::vector<std::string> examples;
  for (const DialogueSample& s : train) {
    if (s.knowledge == "no_passages_used" || !response_copies_knowledge(s.knowledge, s.response)) continue;
    examples.push_back("Topic: " + s.topic + ". User says: " + word_tokenized(s.turns().back()) +
                       " We know that: " + word_tokenized(s.knowledge) + " System replies: " +
                       word_tokenized(s.response));
  }
  std::mt19937_64 random(seed);
  std::shuffle(examples.begin(), examples.end(), random);
  examples.resize(std::min<size_t>(examples.size(), static_cast<size_t>(std::max<int64_t>(count, 0))));
  return examples;
}

std::string knowledge_generation_input(const DialogueSample& sample, const std::vector<std::string>& examples) {
  std::string input;
  for (const std::string& e : examples) input += strip(e) + " \n";
  return input + "( " + sample.turns().back() + " ) " + sample.topic + " =>";
}

std::string response_generation_input(const DialogueSample& sample, const std::vector<std::string>& examples) {
  std::string input;
  for (const std::string& e : examples) input += strip(e) + " \n";
  return input + "Topic: " + sample.topic + ". User says: " + strip(word_tokenized(sample.turns().back())) +
         " We know that: " + strip(word_tokenized(sample.knowledge)) + " System replies:";
}

std::string msdp_output(const std::string& continuation) { return strip(continuation.substr(0, continuation.find('\n'))); }

std::vector<DialogueSample> with_generated_knowledge(const std::vector<DialogueSample>& test,
                                                     const std::vector<std::string>& knowledge) {
  TESSERA_CHECK(test.size() == knowledge.size(), "prepare_input: ", test.size(), " test samples but ",
                knowledge.size(), " generated knowledge lines");
  std::vector<DialogueSample> out = test;
  for (size_t i = 0; i < out.size(); ++i) {
    std::string k = strip(knowledge[i]);
    eval::replace_all(k, "<|endoftext|>", "");
    out[i].knowledge = k;
  }
  return out;
}

}  // namespace tessera::tasks
