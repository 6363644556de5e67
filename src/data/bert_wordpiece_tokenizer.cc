#include "data/bert_wordpiece_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <unordered_map>

#include "core/check.h"
#include "data/gpt2_bpe_tokenizer.h"  // replace_invalid_utf8

namespace tessera::data {

namespace {

#include "data/bert_unicode_tables.inc"

enum CharClass : uint32_t { kNone = 0, kOther = 1, kNonspacingMark = 2, kPunctuation = 3 };

CharClass char_class(char32_t c) {
  // The last run starting at or before c.
  const uint32_t key = (static_cast<uint32_t>(c) << 2) | 3;
  const uint32_t* it = std::upper_bound(std::begin(kClassRuns), std::end(kClassRuns), key);
  return static_cast<CharClass>(it[-1] & 3);
}

uint32_t combining_class(char32_t c) {
  const uint32_t key = (static_cast<uint32_t>(c) << 8) | 0xFF;
  const uint32_t* it = std::upper_bound(std::begin(kCombiningClassRuns), std::end(kCombiningClassRuns), key);
  return it == std::begin(kCombiningClassRuns) ? 0 : (it[-1] & 0xFF);
}

// Rust's char::is_whitespace: the White_Space property (stable since Unicode 4.1).
bool is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_control(char32_t c) { return c != '\t' && c != '\n' && c != '\r' && char_class(c) == kOther; }

// BERT's "Chinese characters": the CJK Unified Ideographs blocks and their compatibility blocks. As in
// Hugging Face's tokenizers, Extension E starts at U+2B920, not U+2B820 (Google's and the slow Python
// tokenizer's bound): U+2B820..U+2B91F stay inside words.
bool is_cjk(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool is_punctuation(char32_t c) {
  const bool ascii_punct = (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
  return ascii_punct || char_class(c) == kPunctuation;
}

void decompose(char32_t c, std::u32string& out) {
  constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
  constexpr char32_t kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = 19 * kNCount;
  if (c >= kSBase && c < kSBase + kSCount) {  // Hangul syllables decompose by arithmetic
    const char32_t s = c - kSBase;
    out += kLBase + s / kNCount;
    out += kVBase + (s % kNCount) / kTCount;
    if (s % kTCount) out += kTBase + s % kTCount;
    return;
  }
  // kDecompositions holds triples sorted by code point.
  size_t lo = 0, hi = std::size(kDecompositions) / 3;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (kDecompositions[3 * mid] < c) lo = mid + 1; else hi = mid;
  }
  if (lo < std::size(kDecompositions) / 3 && kDecompositions[3 * lo] == c) {
    decompose(kDecompositions[3 * lo + 1], out);
    if (kDecompositions[3 * lo + 2]) decompose(kDecompositions[3 * lo + 2], out);
    return;
  }
  out += c;
}

// NFD: full canonical decomposition, then each run of combining characters in canonical order.
std::u32string nfd(const std::u32string& in) {
  std::u32string out;
  out.reserve(in.size());
  for (char32_t c : in) decompose(c, out);
  for (size_t i = 0; i < out.size();) {
    if (combining_class(out[i]) == 0) { ++i; continue; }
    size_t j = i;
    while (j < out.size() && combining_class(out[j]) != 0) ++j;
    std::stable_sort(out.begin() + i, out.begin() + j,
                     [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
  return out;
}

void append_lower(char32_t c, std::u32string& out) {
  if (c < 0x80) {
    out += (c >= 'A' && c <= 'Z') ? c + 32 : c;
    return;
  }
  size_t lo = 0, hi = std::size(kLowercase) / 4;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (kLowercase[4 * mid] < c) lo = mid + 1; else hi = mid;
  }
  if (lo < std::size(kLowercase) / 4 && kLowercase[4 * lo] == c) {
    for (int k = 1; k <= 3 && kLowercase[4 * lo + k]; ++k) out += kLowercase[4 * lo + k];
    return;
  }
  out += c;
}

// Valid UTF-8 (replace_invalid_utf8 has run) to code points and back.
std::u32string to_u32(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char b = static_cast<unsigned char>(s[i]);
    const int n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    char32_t c = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
    for (int k = 1; k < n; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out += c;
    i += n;
  }
  return out;
}

void append_utf8(char32_t c, std::string& out) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

// Steps 2-4: BertNormalizer.
std::u32string normalize(std::string_view valid_utf8, bool lower_case) {
  std::u32string text;
  for (char32_t c : to_u32(valid_utf8)) {
    if (c == 0 || c == 0xFFFD || is_control(c)) continue;
    if (is_whitespace(c)) {
      text += U' ';
    } else if (is_cjk(c)) {
      text += U' ';
      text += c;
      text += U' ';
    } else {
      text += c;
    }
  }
  if (!lower_case) return text;
  std::u32string lowered;
  lowered.reserve(text.size());
  for (char32_t c : nfd(text)) {
    if (char_class(c) != kNonspacingMark) append_lower(c, lowered);
  }
  return lowered;
}

// Step 5: BertPreTokenizer, as code point strings.
std::vector<std::u32string> split_words(const std::u32string& text) {
  std::vector<std::u32string> words;
  std::u32string word;
  for (char32_t c : text) {
    if (is_whitespace(c) || is_punctuation(c)) {
      if (!word.empty()) words.push_back(std::move(word));
      word.clear();
      if (!is_whitespace(c)) words.push_back(std::u32string(1, c));
    } else {
      word += c;
    }
  }
  if (!word.empty()) words.push_back(std::move(word));
  return words;
}

std::string to_utf8(const std::u32string& s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(c, out);
  return out;
}

constexpr size_t kMaxInputCharsPerWord = 100;
constexpr const char* kSpecials[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out += to;
  }
  out.append(s, pos);
  s = std::move(out);
}

}  // namespace

std::optional<bool> bert_wordpiece_lower_case_from_name(std::string_view tokenizer_type) {
  if (tokenizer_type == "BertWordPieceLowerCase") return true;
  if (tokenizer_type == "BertWordPieceCase") return false;
  return std::nullopt;
}

std::vector<std::string> bert_basic_tokenize(std::string_view text, bool lower_case) {
  std::string storage;
  std::vector<std::string> out;
  for (const auto& w : split_words(normalize(replace_invalid_utf8(text, storage), lower_case))) out.push_back(to_utf8(w));
  return out;
}

struct BertWordPieceTokenizer::Impl {
  std::string path;
  bool lower_case = true;
  std::vector<std::string> pieces;  // by id: the file's lines, then Megatron's added tokens
  int32_t file_pieces = 0;
  std::unordered_map<std::string, int32_t> ids;  // the file's pieces only: what WordPiece may give
  std::vector<std::pair<std::string, int32_t>> specials;  // cut out of the text by encode()
  int32_t cls = -1, sep = -1, mask = -1, pad = -1, unk = -1, bos = -1, eos = -1;

  int32_t required(const char* piece) const {
    auto it = ids.find(piece);
    TESSERA_CHECK(it != ids.end(), "--vocab-file '", path, "': a BERT vocabulary needs the piece ", piece,
                  " and this one has none");
    return it->second;
  }

  // Megatron's add_token: a piece already there keeps its id.
  int32_t add(const std::string& piece) {
    if (auto it = ids.find(piece); it != ids.end()) return it->second;
    for (size_t i = file_pieces; i < pieces.size(); ++i)
      if (pieces[i] == piece) return static_cast<int32_t>(i);
    pieces.push_back(piece);
    return static_cast<int32_t>(pieces.size() - 1);
  }

  // Step 6 for one word; appends ids.
  void wordpiece(const std::u32string& word, std::vector<int32_t>& out) const {
    if (word.size() > kMaxInputCharsPerWord) {
      out.push_back(unk);
      return;
    }
    const size_t before = out.size();
    const std::string utf8 = to_utf8(word);
    // Byte offsets of the characters, so that candidates end on character boundaries.
    std::vector<size_t> ends;
    for (size_t i = 0, k = 0; k < word.size(); ++k) {
      const unsigned char b = static_cast<unsigned char>(utf8[i]);
      i += b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
      ends.push_back(i);
    }
    size_t start_char = 0, start = 0;
    std::string candidate;
    while (start_char < word.size()) {
      int32_t found = -1;
      size_t end_char = word.size();
      for (; end_char > start_char; --end_char) {
        candidate.assign(start_char > 0 ? "##" : "");
        candidate.append(utf8, start, ends[end_char - 1] - start);
        if (auto it = ids.find(candidate); it != ids.end()) {
          found = it->second;
          break;
        }
      }
      if (found < 0) {
        out.resize(before);
        out.push_back(unk);
        return;
      }
      out.push_back(found);
      start = ends[end_char - 1];
      start_char = end_char;
    }
  }

  void encode_plain(std::string_view valid, std::vector<int32_t>& out) const {
    if (valid.empty()) return;
    for (const auto& w : split_words(normalize(valid, lower_case))) wordpiece(w, out);
  }
};

BertWordPieceTokenizer::BertWordPieceTokenizer(const std::string& vocab_file, bool lower_case, int32_t vocab_extra_ids)
    : impl_(std::make_unique<Impl>()) {
  namespace fs = std::filesystem;
  Impl& m = *impl_;
  m.path = vocab_file;
  m.lower_case = lower_case;
  std::error_code ec;
  TESSERA_CHECK(!vocab_file.empty(), "--vocab-file: no BERT vocabulary (vocab.txt) given");
  TESSERA_CHECK(fs::exists(vocab_file, ec), "--vocab-file: BERT vocabulary '", vocab_file, "' does not exist");
  TESSERA_CHECK(fs::is_regular_file(vocab_file, ec), "--vocab-file: '", vocab_file, "' is not a regular file");
  TESSERA_CHECK(vocab_extra_ids >= 0, "--vocab-extra-ids must be >= 0, got ", vocab_extra_ids);
  std::ifstream in(vocab_file, std::ios::binary);
  TESSERA_CHECK(in.good(), "--vocab-file: cannot read '", vocab_file, "'");
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
    TESSERA_CHECK(!line.empty(), "--vocab-file '", vocab_file, "' line ", number,
                  ": an empty piece (vocab.txt has one piece per line, the id being the line's number from 0)");
    const int32_t id = static_cast<int32_t>(m.pieces.size());
    auto [it, inserted] = m.ids.emplace(line, id);
    TESSERA_CHECK(inserted, "--vocab-file '", vocab_file, "' line ", number, ": the piece '", line,
                  "' is already on line ", it->second + 1);
    m.pieces.push_back(line);
  }
  TESSERA_CHECK(!in.bad(), "--vocab-file: error reading '", vocab_file, "'");
  TESSERA_CHECK(!m.pieces.empty(), "--vocab-file '", vocab_file, "' is empty (expected a BERT vocab.txt)");
  m.file_pieces = static_cast<int32_t>(m.pieces.size());
  m.unk = m.required("[UNK]");
  m.cls = m.required("[CLS]");
  m.sep = m.required("[SEP]");
  m.pad = m.required("[PAD]");
  m.mask = m.required("[MASK]");
  for (const char* s : kSpecials) m.specials.emplace_back(s, m.required(s));
  m.bos = m.add("[BOS]");
  m.eos = m.add("[EOS]");
  for (int32_t i = 0; i < vocab_extra_ids; ++i) m.add(str_cat("<extra_id_", i, ">"));
}

BertWordPieceTokenizer::~BertWordPieceTokenizer() = default;

std::vector<int32_t> BertWordPieceTokenizer::encode(std::string_view text) const {
  const Impl& m = *impl_;
  std::string storage;
  const std::string_view valid = replace_invalid_utf8(text, storage);
  std::vector<int32_t> ids;
  // Step 1: the leftmost special piece, the longest where several start at one byte (all start "[").
  size_t pos = 0;
  for (size_t at = valid.find('[', pos); at != std::string_view::npos; at = valid.find('[', at + 1)) {
    const std::pair<std::string, int32_t>* best = nullptr;
    for (const auto& s : m.specials) {
      if (valid.substr(at, s.first.size()) == s.first && (!best || s.first.size() > best->first.size())) best = &s;
    }
    if (!best) continue;
    m.encode_plain(valid.substr(pos, at - pos), ids);
    ids.push_back(best->second);
    pos = at + best->first.size();
    at = pos - 1;
  }
  m.encode_plain(valid.substr(pos), ids);
  return ids;
}

std::vector<std::string> BertWordPieceTokenizer::tokenize(std::string_view text) const {
  std::vector<std::string> out;
  for (int32_t id : encode(text)) out.push_back(impl_->pieces[id]);
  return out;
}

std::string BertWordPieceTokenizer::decode(std::span<const int32_t> ids) const {
  const Impl& m = *impl_;
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    TESSERA_CHECK(ids[i] >= 0 && ids[i] < vocab_size(), "token id ", ids[i], " at position ", i,
                  " is outside the vocabulary [0, ", vocab_size(), ") of ", name(), " '", m.path, "'");
    if (i) text += ' ';
    text += m.pieces[ids[i]];
  }
  replace_all(text, " ##", "");
  const size_t first = text.find_first_not_of(" \t\n\r\f\v");
  text = first == std::string::npos ? "" : text.substr(first, text.find_last_not_of(" \t\n\r\f\v") - first + 1);
  for (auto [from, to] : {std::pair{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
                          {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}}) {
    replace_all(text, from, to);
  }
  return text;
}

int32_t BertWordPieceTokenizer::vocab_size() const { return static_cast<int32_t>(impl_->pieces.size()); }
int32_t BertWordPieceTokenizer::eod() const { return impl_->eos; }
std::string_view BertWordPieceTokenizer::name() const {
  return impl_->lower_case ? "BertWordPieceLowerCase" : "BertWordPieceCase";
}
int32_t BertWordPieceTokenizer::cls() const { return impl_->cls; }
int32_t BertWordPieceTokenizer::sep() const { return impl_->sep; }
int32_t BertWordPieceTokenizer::mask() const { return impl_->mask; }
int32_t BertWordPieceTokenizer::pad() const { return impl_->pad; }
int32_t BertWordPieceTokenizer::unk() const { return impl_->unk; }
int32_t BertWordPieceTokenizer::bos() const { return impl_->bos; }
int32_t BertWordPieceTokenizer::eos() const { return impl_->eos; }
bool BertWordPieceTokenizer::lower_case() const { return impl_->lower_case; }
const std::string& BertWordPieceTokenizer::vocab_file() const { return impl_->path; }

const std::string& BertWordPieceTokenizer::token(int32_t id) const {
  TESSERA_CHECK(id >= 0 && id < vocab_size(), "token id ", id, " is outside the vocabulary [0, ", vocab_size(),
                ") of ", name(), " '", impl_->path, "'");
  return impl_->pieces[id];
}

int32_t BertWordPieceTokenizer::token_to_id(std::string_view piece) const {
  const Impl& m = *impl_;
  if (auto it = m.ids.find(std::string(piece)); it != m.ids.end()) return it->second;
  for (size_t i = m.file_pieces; i < m.pieces.size(); ++i)
    if (m.pieces[i] == piece) return static_cast<int32_t>(i);
  return -1;
}

}  // namespace tessera::data
