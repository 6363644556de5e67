#include "data/wordpiece_trainer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <queue>
#include <unordered_map>

#include "core/check.h"
#include "data/bert_wordpiece_tokenizer.h"

namespace tessera::data {

namespace fs = std::filesystem;

namespace {

// The UTF-8 characters of a word (valid UTF-8: bert_basic_tokenize's output).
std::vector<std::string> characters(const std::string& word) {
  std::vector<std::string> out;
  for (size_t i = 0; i < word.size();) {
    const unsigned char b = static_cast<unsigned char>(word[i]);
    const size_t n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    out.push_back(word.substr(i, n));
    i += n;
  }
  return out;
}

uint64_t symbol_pair_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }

struct Candidate {
  int64_t count;
  uint64_t pair;
  // The priority queue's top is the largest: more frequent first, then the smaller pair of ids.
  bool operator<(const Candidate& o) const { return count != o.count ? count < o.count : pair > o.pair; }
};

}  // namespace

const std::vector<std::string>& wordpiece_special_pieces() {
  static const std::vector<std::string> pieces = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  return pieces;
}

std::vector<std::string> train_wordpiece_vocab(const std::map<std::string, int64_t>& word_counts,
                                               const WordPieceTrainOptions& o) {
  std::vector<std::string> pieces;
  std::unordered_map<std::string, int32_t> ids;
  auto add = [&](const std::string& piece) {
    auto [it, inserted] = ids.emplace(piece, static_cast<int32_t>(pieces.size()));
    if (inserted) pieces.push_back(piece);
    return it->second;
  };
  for (const auto& s : wordpiece_special_pieces()) add(s);

  // Step 2: the alphabet.
  std::map<std::string, int64_t> char_counts;
  for (const auto& [word, count] : word_counts)
    for (const auto& c : characters(word)) char_counts[c] += count;
  std::vector<std::pair<std::string, int64_t>> chars(char_counts.begin(), char_counts.end());
  if (chars.size() > static_cast<size_t>(o.limit_alphabet)) {
    // Most frequent first; among equals, the smaller code point (UTF-8 byte order is code point order).
    std::stable_sort(chars.begin(), chars.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    chars.resize(o.limit_alphabet);
    std::sort(chars.begin(), chars.end());
  }
  std::unordered_map<std::string, bool> alphabet;
  for (const auto& [c, count] : chars) {
    add(c);
    alphabet[c] = true;
  }

  // Step 3: words as pieces.
  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> counts;
  for (const auto& [word, count] : word_counts) {
    std::vector<int32_t> w;
    const auto cs = characters(word);
    for (size_t k = 0; k < cs.size(); ++k) {
      // "##" by the position in the word, even where the characters before were dropped (as Hugging Face).
      if (alphabet.count(cs[k])) w.push_back(add(k == 0 ? cs[k] : "##" + cs[k]));
    }
    words.push_back(std::move(w));
    counts.push_back(count);
  }

  // Step 4: merges. counts of pairs, the words holding each pair, and a queue with stale entries
  // skipped (an entry is valid while its count is the pair's count).
  std::unordered_map<uint64_t, int64_t> pair_counts;
  std::unordered_map<uint64_t, std::vector<int32_t>> where;
  std::priority_queue<Candidate> queue;
  for (size_t i = 0; i < words.size(); ++i) {
    for (size_t k = 0; k + 1 < words[i].size(); ++k) {
      const uint64_t p = symbol_pair_key(words[i][k], words[i][k + 1]);
      pair_counts[p] += counts[i];
      auto& list = where[p];
      if (list.empty() || list.back() != static_cast<int32_t>(i)) list.push_back(static_cast<int32_t>(i));
    }
  }
  for (const auto& [p, c] : pair_counts) queue.push({c, p});

  while (static_cast<int32_t>(pieces.size()) < o.vocab_size && !queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    const int64_t current = pair_counts[top.pair];
    if (current != top.count) {
      if (current > 0) queue.push({current, top.pair});
      continue;
    }
    if (top.count < 1 || top.count < o.min_frequency) break;
    const int32_t a = static_cast<int32_t>(top.pair >> 32), b = static_cast<int32_t>(top.pair & 0xFFFFFFFFu);
    const std::string& second = pieces[b];
    const std::string merged = pieces[a] + (second.rfind("##", 0) == 0 ? second.substr(2) : second);
    const int32_t m = add(merged);
    std::vector<int32_t> holders = std::move(where[top.pair]);
    where.erase(top.pair);
    std::vector<uint64_t> grown;
    for (int32_t i : holders) {
      auto& w = words[i];
      bool has = false;
      for (size_t k = 0; k + 1 < w.size() && !has; ++k) has = w[k] == a && w[k + 1] == b;
      if (!has) continue;
      for (size_t k = 0; k + 1 < w.size(); ++k) pair_counts[symbol_pair_key(w[k], w[k + 1])] -= counts[i];
      std::vector<int32_t> next;
      for (size_t k = 0; k < w.size(); ++k) {
        if (k + 1 < w.size() && w[k] == a && w[k + 1] == b) {
          next.push_back(m);
          ++k;
        } else {
          next.push_back(w[k]);
        }
      }
      w = std::move(next);
      for (size_t k = 0; k + 1 < w.size(); ++k) {
        const uint64_t p = symbol_pair_key(w[k], w[k + 1]);
        pair_counts[p] += counts[i];
        grown.push_back(p);
        if (p != top.pair) {
          auto& list = where[p];
          if (list.empty() || list.back() != i) list.push_back(i);
        }
      }
    }
    std::sort(grown.begin(), grown.end());
    grown.erase(std::unique(grown.begin(), grown.end()), grown.end());
    for (uint64_t p : grown)
      if (pair_counts[p] > 0) queue.push({pair_counts[p], p});
  }
  return pieces;
}

WordPieceTrainResult train_wordpiece(const WordPieceTrainOptions& o) {
  TESSERA_CHECK(!o.input.empty(), "--input: give at least one text file to train on");
  std::error_code ec;
  for (const auto& path : o.input) {
    TESSERA_CHECK(fs::exists(path, ec), "--input: '", path, "' does not exist");
    TESSERA_CHECK(fs::is_regular_file(path, ec), "--input: '", path, "' is not a regular file");
  }
  TESSERA_CHECK(!o.model_prefix.empty(), "--model-prefix: give the output path without extension "
                "(writes PREFIX-vocab.txt)");
  const fs::path prefix(o.model_prefix);
  TESSERA_CHECK(prefix.has_filename(), "--model-prefix '", o.model_prefix,
                "' must name a file, not end in a directory separator");
  const fs::path dir = prefix.parent_path().empty() ? fs::path(".") : prefix.parent_path();
  TESSERA_CHECK(fs::is_directory(dir, ec), "--model-prefix '", o.model_prefix, "': directory '", dir.string(),
                "' does not exist");
  const int32_t specials = static_cast<int32_t>(wordpiece_special_pieces().size());
  TESSERA_CHECK(o.vocab_size > specials, "--vocab-size must be more than the ", specials,
                " special pieces, got ", o.vocab_size);
  TESSERA_CHECK(o.min_frequency >= 0, "--min-frequency must be >= 0, got ", o.min_frequency);
  TESSERA_CHECK(o.limit_alphabet > 0, "--limit-alphabet must be positive, got ", o.limit_alphabet);

  std::map<std::string, int64_t> word_counts;
  for (const auto& path : o.input) {
    std::ifstream in(path, std::ios::binary);
    TESSERA_CHECK(in.good(), "--input: cannot open '", path, "'");
    for (std::string line; std::getline(in, line);)
      for (auto& w : bert_basic_tokenize(line, o.lower_case)) ++word_counts[std::move(w)];
    TESSERA_CHECK(!in.bad(), "--input: error reading '", path, "'");
  }
  TESSERA_CHECK(!word_counts.empty(), "--input: no words to train on (the input has no text)");

  const auto pieces = train_wordpiece_vocab(word_counts, o);
  WordPieceTrainResult result{o.model_prefix + "-vocab.txt", static_cast<int32_t>(pieces.size())};
  const std::string tmp = result.vocab_path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    TESSERA_CHECK(out.good(), "--model-prefix: cannot write '", tmp, "'");
    for (const auto& p : pieces) out << p << '\n';
    out.flush();
    TESSERA_CHECK(out.good(), "--model-prefix: error writing '", tmp, "'");
  }
  fs::rename(tmp, result.vocab_path, ec);
  TESSERA_CHECK(!ec, "--model-prefix: cannot rename '", tmp, "' to '", result.vocab_path, "': ", ec.message());
  return result;
}

}  // namespace tessera::data
