#include "data/gpt2_bpe_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/check.h"

namespace tessera::data {
namespace {

constexpr std::string_view kEndOfText = "<|endoftext|>";
constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD
// Pre-tokens whose BPE result is kept. Natural text repeats a few tens of thousands of words; when a
// shard is full it is cleared, which is simpler than LRU and costs only re-merging the common words.
// Threads share the cache; each shard has its own lock so that they seldom wait for one another.
constexpr size_t kWordCacheShards = 16;
constexpr size_t kWordCacheCapacity = 1 << 16;  // over all shards
// Longer pre-tokens (runs of spaces or symbols, blobs) rarely repeat; not caching them bounds the memory.
constexpr size_t kMaxCachedPieceBytes = 128;
constexpr int32_t kNoMerge = INT32_MAX;

// Letters and numbers of Unicode 15.0-17.0 that PCRE2 10.42's tables (Debian 13) lack. The reference
// encoders (node 20, Python's `regex`) classify by Unicode 17, so they are added to \p{L} and \p{N}; a
// newer PCRE2 already has them, and the union is the same. Derived by comparing node's /\p{L}/u and
// /\p{N}/u with PCRE2's over every code point; the all-code-points test corpus checks it.
constexpr const char* kLettersSincePcre2Tables =
    "\\x{88F}\\x{C5C}\\x{CDC}\\x{1C89}-\\x{1C8A}\\x{A7CB}-\\x{A7CF}\\x{A7D2}\\x{A7D4}"
    "\\x{A7DA}-\\x{A7DC}\\x{A7F1}\\x{105C0}-\\x{105F3}\\x{10940}-\\x{10959}"
    "\\x{10D4A}-\\x{10D65}\\x{10D6F}-\\x{10D85}\\x{10EC2}-\\x{10EC7}\\x{1123F}-\\x{11240}"
    "\\x{11380}-\\x{11389}\\x{1138B}\\x{1138E}\\x{11390}-\\x{113B5}\\x{113B7}\\x{113D1}"
    "\\x{113D3}\\x{11BC0}-\\x{11BE0}\\x{11DB0}-\\x{11DDB}\\x{11F02}\\x{11F04}-\\x{11F10}"
    "\\x{11F12}-\\x{11F33}\\x{1342F}\\x{13441}-\\x{13446}\\x{13460}-\\x{143FA}"
    "\\x{16100}-\\x{1611D}\\x{16D40}-\\x{16D6C}\\x{16EA0}-\\x{16EB8}\\x{16EBB}-\\x{16ED3}"
    "\\x{16FF2}-\\x{16FF3}\\x{187F8}-\\x{187FF}\\x{18CFF}\\x{18D09}-\\x{18D1E}"
    "\\x{18D80}-\\x{18DF2}\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{1DF2A}\\x{1E030}-\\x{1E06D}"
    "\\x{1E4D0}-\\x{1E4EB}\\x{1E5D0}-\\x{1E5ED}\\x{1E5F0}\\x{1E6C0}-\\x{1E6DE}"
    "\\x{1E6E0}-\\x{1E6E2}\\x{1E6E4}-\\x{1E6E5}\\x{1E6E7}-\\x{1E6ED}\\x{1E6F0}-\\x{1E6F4}"
    "\\x{1E6FE}-\\x{1E6FF}\\x{2B739}-\\x{2B73F}\\x{2CEA2}-\\x{2CEAD}\\x{2EBF0}-\\x{2EE5D}"
    "\\x{31350}-\\x{33479}";
constexpr const char* kNumbersSincePcre2Tables =
    "\\x{10D40}-\\x{10D49}\\x{116D0}-\\x{116E3}\\x{11BF0}-\\x{11BF9}\\x{11DE0}-\\x{11DE9}"
    "\\x{11F50}-\\x{11F59}\\x{16130}-\\x{16139}\\x{16D70}-\\x{16D79}\\x{16FF4}-\\x{16FF6}"
    "\\x{1CCF0}-\\x{1CCF9}\\x{1D2C0}-\\x{1D2D3}\\x{1E4F0}-\\x{1E4F9}\\x{1E5F1}-\\x{1E5FA}";

// \s spelled out, because the references disagree with each other and with PCRE2 (whose UCP \s also
// has U+180E). Common to all: tab, LF, VT, FF, CR and the space separators (Zs), LS and PS.
constexpr const char* kCommonWhitespace =
    "\\t\\n\\x0B\\f\\r\\x20\\xA0\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

std::string gpt2_pattern(Gpt2Flavor flavor) {
  const std::string ws = std::string(kCommonWhitespace) +
                         (flavor == Gpt2Flavor::kOpenAi ? "\\x{85}" /* White_Space */ : "\\x{FEFF}" /* JS */);
  const std::string letters = std::string("\\p{L}") + kLettersSincePcre2Tables;
  const std::string numbers = std::string("\\p{N}") + kNumbersSincePcre2Tables;
  return "'s|'t|'re|'ve|'m|'ll|'d| ?[" + letters + "]+| ?[" + numbers + "]+| ?[^" + ws + letters + numbers +
         "]+|[" + ws + "]+(?![^" + ws + "])|[" + ws + "]+";
}

// Length of the well-formed UTF-8 sequence at s[i]; 0 if it is ill-formed, with *bad set to the length
// of its maximal ill-formed subpart (the bytes one U+FFFD replaces, as in WHATWG's decoder).
size_t utf8_sequence(const unsigned char* s, size_t n, size_t i, size_t* bad) {
  const unsigned c = s[i];
  if (c < 0x80) return 1;
  size_t need;
  unsigned lo = 0x80, hi = 0xBF;  // the range of the second byte; later ones are always 80..BF
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0;  // overlong
    if (c == 0xED) hi = 0x9F;  // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90;  // overlong
    if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    *bad = 1;
    return 0;
  }
  for (size_t k = 1; k <= need; ++k) {
    if (i + k >= n || s[i + k] < lo || s[i + k] > hi) {
      *bad = k;
      return 0;
    }
    lo = 0x80;
    hi = 0xBF;
  }
  return need + 1;
}

// Index of the first byte not in a well-formed sequence, or n.
size_t first_invalid_utf8(const unsigned char* s, size_t n) {
  size_t i = 0, bad = 0;
  while (i < n) {
    // Most text is ASCII: skip 8 bytes at a time while none has its top bit set.
    while (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, s + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    const size_t len = utf8_sequence(s, n, i, &bad);
    if (len == 0) return i;
    i += len;
  }
  return n;
}

// The code points of valid UTF-8 `s`.
std::u32string utf8_to_code_points(std::string_view s) {
  std::u32string out;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0, bad = 0;
  while (i < s.size()) {
    const size_t len = utf8_sequence(p, s.size(), i, &bad);
    if (len == 0) return U"\uFFFD";  // not reached: nlohmann_json only produces valid UTF-8
    char32_t cp = len == 1 ? p[i] : p[i] & (0x7F >> len);
    for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (p[i + k] & 0x3F);
    out.push_back(cp);
    i += len;
  }
  return out;
}

std::string code_point_to_utf8(char32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace

std::array<char32_t, 256> gpt2_bytes_to_unicode() {
  std::array<char32_t, 256> map{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    map[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return map;
}

std::string_view replace_invalid_utf8(std::string_view text, std::string& storage) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = first_invalid_utf8(s, n);
  if (i == n) return text;
  storage.assign(text.substr(0, i));
  size_t bad = 0;
  while (i < n) {
    const size_t len = utf8_sequence(s, n, i, &bad);
    if (len == 0) {
      storage += kReplacementChar;
      i += bad;
    } else {
      storage.append(text.substr(i, len));
      i += len;
    }
  }
  return storage;
}

struct Gpt2BpeTokenizer::Impl {
  struct Merge {
    int32_t rank = kNoMerge;
    int32_t id = -1;  // the merged token
  };

  Gpt2Flavor flavor;
  std::vector<std::string> token_bytes;  // id -> the bytes it stands for
  std::array<int32_t, 256> byte_id{};    // the single-byte tokens BPE starts from
  std::unordered_map<uint64_t, Merge> merges;
  int32_t eod = -1;

  pcre2_code* regex = nullptr;
  bool jit = false;

  struct StringHash {  // lets the word cache be searched with a string_view, without a copy
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct CacheShard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> words;
  };
  mutable std::array<CacheShard, kWordCacheShards> word_cache;

  ~Impl() { pcre2_code_free(regex); }

  void load_vocab(const std::string& path, std::unordered_map<std::string, int32_t>& ids_by_text);
  void load_merges(const std::string& path, const std::unordered_map<std::string, int32_t>& ids_by_text);
  void compile_regex();

  Merge merge_of(int32_t a, int32_t b) const {
    const auto it = merges.find(pair_key(a, b));
    return it == merges.end() ? Merge{} : it->second;
  }
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  void append_word(std::string_view piece, std::vector<int32_t>& ids) const;
};

// vocab.json: {"token": id, ...}; tokens are spelled with gpt2_bytes_to_unicode's stand-ins.
void Gpt2BpeTokenizer::Impl::load_vocab(const std::string& path,
                                        std::unordered_map<std::string, int32_t>& ids_by_text) {
  std::ifstream in(path, std::ios::binary);
  TESSERA_CHECK(in, "cannot open GPT-2 vocab file ", path, ": ", std::strerror(errno));
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(str_cat("GPT-2 vocab file ", path, " is not valid JSON: ", e.what()));
  } catch (const std::ios_base::failure&) {
    // A directory opens but cannot be read; libstdc++ reports it by throwing from the stream buffer.
    throw Error(str_cat("cannot read GPT-2 vocab file ", path, ": ", std::strerror(errno)));
  }
  TESSERA_CHECK(json.is_object() && !json.empty(), "GPT-2 vocab file ", path,
                " must be a non-empty JSON object mapping tokens to ids");

  std::array<int, 0x144> byte_of_stand_in;  // stand-ins are all below U+0144
  byte_of_stand_in.fill(-1);
  const auto stand_ins = gpt2_bytes_to_unicode();
  for (int b = 0; b < 256; ++b) byte_of_stand_in[stand_ins[b]] = b;

  const size_t n = json.size();
  token_bytes.assign(n, {});
  std::vector<bool> seen(n, false);
  for (const auto& [text, value] : json.items()) {
    TESSERA_CHECK(value.is_number_integer(), "GPT-2 vocab file ", path, ": the id of token ", text,
                  " is not an integer");
    const int64_t id = value.get<int64_t>();
    TESSERA_CHECK(id >= 0 && static_cast<size_t>(id) < n, "GPT-2 vocab file ", path, ": token ", text,
                  " has id ", id, ", but the ", n, " ids must be 0..", n - 1);
    TESSERA_CHECK(!seen[id], "GPT-2 vocab file ", path, ": id ", id, " is given to two tokens (one is ", text,
                  ")");
    seen[id] = true;
    std::string bytes;
    for (char32_t cp : utf8_to_code_points(text)) {
      TESSERA_CHECK(cp < byte_of_stand_in.size() && byte_of_stand_in[cp] >= 0, "GPT-2 vocab file ", path,
                    ": token ", text, " has a character outside GPT-2's byte alphabet");
      bytes += static_cast<char>(byte_of_stand_in[cp]);
    }
    token_bytes[id] = bytes;
    ids_by_text.emplace(text, static_cast<int32_t>(id));
  }

  const auto eod_it = ids_by_text.find(std::string(kEndOfText));
  TESSERA_CHECK(eod_it != ids_by_text.end(), "GPT-2 vocab file ", path, " has no ", kEndOfText, " token");
  eod = eod_it->second;
  for (int b = 0; b < 256; ++b) {
    const auto it = ids_by_text.find(code_point_to_utf8(stand_ins[b]));
    TESSERA_CHECK(it != ids_by_text.end(), "GPT-2 vocab file ", path, " has no token for byte 0x", std::hex, b,
                  ", which byte-level BPE starts from");
    byte_id[b] = it->second;
  }
}

// merges.txt: an optional "#version" line, then one merge per line, "first second", highest priority
// first. A merge listed twice keeps its later rank, as in both references.
void Gpt2BpeTokenizer::Impl::load_merges(const std::string& path,
                                         const std::unordered_map<std::string, int32_t>& ids_by_text) {
  std::ifstream in(path, std::ios::binary);
  TESSERA_CHECK(in, "cannot open GPT-2 merges file ", path, ": ", std::strerror(errno));
  auto id_of = [&](const std::string& text) -> std::optional<int32_t> {
    const auto it = ids_by_text.find(text);
    return it == ids_by_text.end() ? std::nullopt : std::optional(it->second);
  };

  // The merge keys in the order they are ranked, "first,second" -> rank (for gpt-3-encoder's lookup).
  std::unordered_map<std::string, int32_t> rank_by_key;
  std::string line;
  int32_t rank = 0;
  for (size_t line_no = 1; std::getline(in, line); ++line_no) {
    if (line_no == 1 && line.starts_with("#version")) continue;
    // Split on ASCII blanks (tokens never contain one: whitespace bytes have stand-ins); tolerate CRLF.
    std::vector<std::string> parts;
    size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
      const size_t start = i;
      while (i < line.size() && !(line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
      if (i > start) parts.push_back(line.substr(start, i - start));
    }
    if (parts.empty()) continue;
    TESSERA_CHECK(parts.size() == 2, "GPT-2 merges file ", path, " line ", line_no,
                  ": expected two tokens separated by a space, got \"", line, "\"");
    const auto a = id_of(parts[0]), b = id_of(parts[1]), merged = id_of(parts[0] + parts[1]);
    TESSERA_CHECK(a && b && merged, "GPT-2 merges file ", path, " line ", line_no, ": ",
                  !a ? parts[0] : !b ? parts[1] : parts[0] + parts[1], " is not in the vocab file");
    merges[pair_key(*a, *b)] = Merge{rank, *merged};
    rank_by_key[parts[0] + "," + parts[1]] = rank;
    ++rank;
  }
  TESSERA_CHECK(!in.bad(), "cannot read GPT-2 merges file ", path, ": ", std::strerror(errno));
  TESSERA_CHECK(rank > 0, "GPT-2 merges file ", path, " has no merges");

  if (flavor == Gpt2Flavor::kGpt3EncoderJs) {
    // gpt-3-encoder ranks a pair by the key "first,second", so every split of a key at a comma that
    // yields two tokens is a mergeable pair with that key's rank (the last-listed one for a key listed
    // twice). A split whose concatenation is not a token is left out: the reference's output there is
    // not ids.
    merges.clear();
    for (const auto& [key, key_rank] : rank_by_key) {
      for (size_t comma = key.find(','); comma != std::string::npos; comma = key.find(',', comma + 1)) {
        const std::string first = key.substr(0, comma), second = key.substr(comma + 1);
        const auto a = id_of(first), b = id_of(second), merged = id_of(first + second);
        if (a && b && merged) merges[pair_key(*a, *b)] = Merge{key_rank, *merged};
      }
    }
  }
}

void Gpt2BpeTokenizer::Impl::compile_regex() {
  const std::string pattern = gpt2_pattern(flavor);
  int error = 0;
  PCRE2_SIZE offset = 0;
  regex = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                        &error, &offset, nullptr);
  if (regex == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    throw Error(str_cat("GPT-2 pre-tokenisation pattern does not compile at offset ", offset, ": ",
                        reinterpret_cast<const char*>(message)));
  }
  // JIT makes matching several times faster; without it (an unsupported CPU) the interpreter is used.
  jit = pcre2_jit_compile(regex, PCRE2_JIT_COMPLETE) == 0;
}

// BPE as both references do it: find the adjacent pair of lowest rank (the last of equal-ranked pairs,
// which matters only for gpt-3-encoder's comma keys), merge every occurrence of it left to right, repeat.
// rank[i] caches the merge of (syms[i], syms[i+1]) and is recomputed only next to merged symbols, so
// a long pre-token costs one scan per merge round rather than one hash lookup per pair.
void Gpt2BpeTokenizer::Impl::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  size_t n = piece.size();
  std::vector<int32_t> syms(n);
  for (size_t i = 0; i < n; ++i) syms[i] = byte_id[static_cast<unsigned char>(piece[i])];
  std::vector<Merge> pair(n);  // pair[n - 1] is unused
  for (size_t i = 0; i + 1 < n; ++i) pair[i] = merge_of(syms[i], syms[i + 1]);
  std::vector<size_t> merged_at;
  while (n > 1) {
    size_t best = n;
    for (size_t i = 0; i + 1 < n; ++i) {
      if (pair[i].rank != kNoMerge && (best == n || pair[i].rank <= pair[best].rank)) best = i;
    }
    if (best == n) break;
    const int32_t first = syms[best], second = syms[best + 1], merged = pair[best].id;
    merged_at.clear();
    size_t o = 0;
    for (size_t i = 0; i < n; ++o) {
      if (i + 1 < n && syms[i] == first && syms[i + 1] == second) {
        syms[o] = merged;
        merged_at.push_back(o);
        i += 2;
      } else {
        syms[o] = syms[i];
        pair[o] = pair[i];  // still right unless the next symbol was merged, which is recomputed below
        i += 1;
      }
    }
    n = o;
    for (size_t m : merged_at) {
      if (m > 0) pair[m - 1] = merge_of(syms[m - 1], syms[m]);
      if (m + 1 < n) pair[m] = merge_of(syms[m], syms[m + 1]);
    }
  }
  out.insert(out.end(), syms.begin(), syms.begin() + n);
}

void Gpt2BpeTokenizer::Impl::append_word(std::string_view piece, std::vector<int32_t>& ids) const {
  if (piece.size() == 1) {
    ids.push_back(byte_id[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (piece.size() > kMaxCachedPieceBytes) {
    bpe(piece, ids);
    return;
  }
  // The top bits pick the shard; the map's buckets use the hash modulo a prime, so they stay spread.
  CacheShard& shard = word_cache[(StringHash{}(piece) >> 32) % kWordCacheShards];
  {
    std::lock_guard lock(shard.mutex);
    const auto it = shard.words.find(piece);
    if (it != shard.words.end()) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> word;
  bpe(piece, word);
  ids.insert(ids.end(), word.begin(), word.end());
  std::lock_guard lock(shard.mutex);
  if (shard.words.size() >= kWordCacheCapacity / kWordCacheShards) shard.words.clear();
  shard.words.emplace(piece, std::move(word));
}

Gpt2BpeTokenizer::Gpt2BpeTokenizer(const std::string& vocab_json_path, const std::string& merges_path,
                                   Gpt2Flavor flavor)
    : impl_(std::make_unique<Impl>()) {
  impl_->flavor = flavor;
  std::unordered_map<std::string, int32_t> ids_by_text;
  impl_->load_vocab(vocab_json_path, ids_by_text);
  impl_->load_merges(merges_path, ids_by_text);
  impl_->compile_regex();
  // Never rehashes: clear() keeps the buckets.
  for (auto& shard : impl_->word_cache) shard.words.reserve(kWordCacheCapacity / kWordCacheShards);
}

Gpt2BpeTokenizer::~Gpt2BpeTokenizer() = default;

int32_t Gpt2BpeTokenizer::vocab_size() const { return static_cast<int32_t>(impl_->token_bytes.size()); }
int32_t Gpt2BpeTokenizer::eod() const { return impl_->eod; }

namespace {
// Calls fn(piece) for each pre-token of valid UTF-8 `text`. The pattern's alternatives cover every
// character, so the matches tile the text.
template <typename Fn>
void for_each_pretoken(const pcre2_code* regex, bool jit, std::string_view text, Fn&& fn) {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
      pcre2_match_data_create_from_pattern(regex, nullptr), &pcre2_match_data_free);
  TESSERA_CHECK(match, "out of memory for PCRE2 match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    // The text was validated once, so PCRE2 must not re-check all of it on every call (quadratic).
    const int rc = jit ? pcre2_jit_match(regex, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, match.get(), nullptr)
                       : pcre2_match(regex, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, match.get(), nullptr);
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      throw Error(str_cat("GPT-2 pre-tokenisation failed at byte ", pos, ": ",
                          reinterpret_cast<const char*>(message)));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
    TESSERA_CHECK(ovector[0] == pos && ovector[1] > pos, "GPT-2 pre-tokenisation skipped text at byte ", pos);
    fn(text.substr(pos, ovector[1] - pos));
    pos = ovector[1];
  }
}
}  // namespace

void Gpt2BpeTokenizer::encode_append(std::string_view text, std::vector<int32_t>& ids) const {
  std::string storage;
  const std::string_view valid = replace_invalid_utf8(text, storage);
  ids.reserve(ids.size() + valid.size() / 4);  // English averages about 4.5 bytes per token
  for_each_pretoken(impl_->regex, impl_->jit, valid, [&](std::string_view piece) { impl_->append_word(piece, ids); });
}

std::vector<int32_t> Gpt2BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  encode_append(text, ids);
  return ids;
}

std::vector<std::string> Gpt2BpeTokenizer::pretokenize(std::string_view text) const {
  std::string storage;
  std::vector<std::string> pieces;
  for_each_pretoken(impl_->regex, impl_->jit, replace_invalid_utf8(text, storage),
                    [&](std::string_view piece) { pieces.emplace_back(piece); });
  return pieces;
}

std::string Gpt2BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) {
    TESSERA_CHECK(id >= 0 && id < vocab_size(), "GPT-2 token id ", id, " is outside the vocabulary [0, ",
                  vocab_size(), ")");
    out += impl_->token_bytes[id];
  }
  return out;
}

}  // namespace tessera::data
