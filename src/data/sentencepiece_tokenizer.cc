#include "data/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "core/check.h"

namespace tessera::data {

namespace fs = std::filesystem;

std::optional<SentencePieceFlavor> sentencepiece_flavor_from_name(std::string_view tokenizer_type) {
  if (tokenizer_type == "SentencePieceTokenizer") return SentencePieceFlavor::kMegatron;
  if (tokenizer_type == "GPTSentencePieceTokenizer") return SentencePieceFlavor::kGpt;
  if (tokenizer_type == "Llama2Tokenizer") return SentencePieceFlavor::kLlama2;
  return std::nullopt;
}

namespace {

std::string_view flavor_name(SentencePieceFlavor flavor) {
  switch (flavor) {
    case SentencePieceFlavor::kMegatron: return "SentencePieceTokenizer";
    case SentencePieceFlavor::kGpt: return "GPTSentencePieceTokenizer";
    case SentencePieceFlavor::kLlama2: return "Llama2Tokenizer";
  }
  return "SentencePieceTokenizer";
}

}  // namespace

struct SentencePieceTokenizer::Impl {
  std::string path;
  SentencePieceFlavor flavor;
  sentencepiece::SentencePieceProcessor sp;
  int32_t pieces = 0;
  // kMegatron's special tokens in the order Megatron adds them (its dict's insertion order, which
  // breaks ties in encode) and the strings of the ids they stand for.
  std::vector<std::pair<std::string, int32_t>> specials;
  std::unordered_map<int32_t, std::string> special_by_id;
  std::vector<std::string> added;  // strings of ids pieces.. (kMegatron's tokens not in the model)
  int32_t cls = -1, sep = -1, eod = -1, mask = -1, pad = -1, bos = -1, eos = -1;

  int32_t vocab_size() const { return pieces + static_cast<int32_t>(added.size()); }

  void add_special(const std::string& token) {
    int32_t id = -1;
    if (int32_t piece = sp.PieceToId(token); piece >= 0 && piece < pieces && sp.IdToPiece(piece) == token) {
      id = piece;  // PieceToId gives unk for unknown strings; only an exact piece counts
    } else {
      auto it = std::find(added.begin(), added.end(), token);
      if (it != added.end()) {
        id = pieces + static_cast<int32_t>(it - added.begin());
      } else {
        id = pieces + static_cast<int32_t>(added.size());
        added.push_back(token);
      }
    }
    bool seen = std::any_of(specials.begin(), specials.end(), [&](const auto& s) { return s.first == token; });
    if (!seen) specials.emplace_back(token, id);
    special_by_id[id] = token;
  }

  int32_t special_id(const std::string& token) const {
    for (const auto& [t, id] : specials)
      if (t == token) return id;
    return -1;
  }

  // A model piece's string, or `fallback` for an id the model does not have (-1), as Megatron's
  // `id_to_piece` raising IndexError.
  std::string piece_or(int32_t id, const char* fallback) const {
    return id >= 0 && id < pieces ? sp.IdToPiece(id) : std::string(fallback);
  }

  void sp_encode_append(std::string_view text, std::vector<int32_t>& out) const {
    if (text.empty()) return;
    std::vector<int> ids;
    auto status = sp.Encode(text, &ids);
    TESSERA_CHECK(status.ok(), "SentencePiece encode failed (", path, "): ", status.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
  }

  void sp_decode_append(const int32_t* ids, size_t n, std::string& out) const {
    if (n == 0) return;
    std::vector<int> v(ids, ids + n);
    std::string text;
    auto status = sp.Decode(v, &text);
    TESSERA_CHECK(status.ok(), "SentencePiece decode failed (", path, "): ", status.ToString());
    out += text;
  }
};

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_path, SentencePieceFlavor flavor,
                                               int32_t vocab_extra_ids)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = model_path;
  m.flavor = flavor;
  std::error_code ec;
  TESSERA_CHECK(!model_path.empty(), "--tokenizer-model: no SentencePiece model file given");
  TESSERA_CHECK(fs::exists(model_path, ec), "--tokenizer-model: SentencePiece model file '", model_path,
                "' does not exist");
  TESSERA_CHECK(fs::is_regular_file(model_path, ec), "--tokenizer-model: '", model_path,
                "' is not a regular file");
  auto status = m.sp.Load(model_path);
  TESSERA_CHECK(status.ok(), "--tokenizer-model: cannot load SentencePiece model '", model_path,
                "': not a valid SentencePiece model (", status.ToString(), ")");
  m.pieces = m.sp.GetPieceSize();
  TESSERA_CHECK(m.pieces > 0, "--tokenizer-model: SentencePiece model '", model_path, "' has no pieces");
  TESSERA_CHECK(vocab_extra_ids >= 0, "--vocab-extra-ids must be >= 0, got ", vocab_extra_ids);
  TESSERA_CHECK(vocab_extra_ids == 0 || flavor == SentencePieceFlavor::kMegatron,
                "--vocab-extra-ids ", vocab_extra_ids, " is only for --tokenizer-type SentencePieceTokenizer, not ",
                flavor_name(flavor));

  if (flavor == SentencePieceFlavor::kMegatron) {
    // Megatron's _SentencePieceTokenizer._initalize.
    m.add_special("<CLS>");
    m.cls = m.special_id("<CLS>");
    m.add_special("<SEP>");
    m.sep = m.special_id("<SEP>");
    m.add_special("<EOD>");
    m.eod = m.special_id("<EOD>");
    m.add_special("<MASK>");
    m.mask = m.special_id("<MASK>");
    const std::string pad_token = m.piece_or(m.sp.pad_id(), "<PAD>");
    m.add_special(pad_token);
    m.pad = m.special_id(pad_token);
    const std::string bos_token = m.piece_or(m.sp.bos_id(), "<BOS>");
    m.add_special(bos_token);
    m.bos = m.special_id(bos_token);
    const std::string eos_token = m.piece_or(m.sp.eos_id(), "<EOS>");
    m.add_special(eos_token);
    m.eos = m.special_id(eos_token);
    for (int32_t i = 0; i < vocab_extra_ids; ++i) m.add_special(str_cat("<extra_id_", i, ">"));
  } else {
    m.pad = m.sp.pad_id();
    m.bos = m.sp.bos_id();
    m.eos = m.sp.eos_id();
    m.eod = m.eos;
    if (flavor == SentencePieceFlavor::kLlama2) {
      TESSERA_CHECK(m.bos >= 0, "--tokenizer-type Llama2Tokenizer puts the bos id before every text, but the "
                    "SentencePiece model '", model_path, "' has no bos piece (trained with bos_id -1)");
    }
  }
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text) const {
  const Impl& m = *impl_;
  std::vector<int32_t> ids;
  if (m.flavor == SentencePieceFlavor::kLlama2) ids.push_back(m.bos);
  if (m.flavor != SentencePieceFlavor::kMegatron) {
    m.sp_encode_append(text, ids);
    return ids;
  }
  // Megatron's tokenize: repeatedly the special token that occurs first (the earliest added among those
  // starting at the same byte); the text before it is encoded on its own. next[i] caches the first
  // occurrence of specials[i] at or after `pos`, which stays valid until `pos` passes it.
  const size_t n = m.specials.size();
  std::vector<size_t> next(n);
  for (size_t i = 0; i < n; ++i) next[i] = text.find(m.specials[i].first);
  size_t pos = 0;
  for (;;) {
    size_t best = n;
    for (size_t i = 0; i < n; ++i) {
      if (next[i] != std::string_view::npos && next[i] < pos) next[i] = text.find(m.specials[i].first, pos);
      if (next[i] != std::string_view::npos && (best == n || next[i] < next[best])) best = i;
    }
    if (best == n) break;
    m.sp_encode_append(text.substr(pos, next[best] - pos), ids);
    ids.push_back(m.specials[best].second);
    pos = next[best] + m.specials[best].first.size();
  }
  m.sp_encode_append(text.substr(pos), ids);
  return ids;
}

std::string SentencePieceTokenizer::decode(std::span<const int32_t> ids) const {
  const Impl& m = *impl_;
  const int32_t vocab = m.vocab_size();
  for (size_t i = 0; i < ids.size(); ++i) {
    TESSERA_CHECK(ids[i] >= 0 && ids[i] < vocab, "token id ", ids[i], " at position ", i,
                  " is outside the vocabulary [0, ", vocab, ") of ", name(), " '", m.path, "'");
  }
  std::string text;
  if (m.flavor != SentencePieceFlavor::kMegatron) {
    m.sp_decode_append(ids.data(), ids.size(), text);
    return text;
  }
  // Megatron's detokenize: each special id ends the run of ordinary ids before it with " token ".
  size_t last = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = m.special_by_id.find(ids[i]);
    if (it == m.special_by_id.end()) continue;
    m.sp_decode_append(ids.data() + last, i - last, text);
    text += ' ';
    text += it->second;
    text += ' ';
    last = i + 1;
  }
  m.sp_decode_append(ids.data() + last, ids.size() - last, text);
  return text;
}

int32_t SentencePieceTokenizer::vocab_size() const { return impl_->vocab_size(); }

int32_t SentencePieceTokenizer::eod() const {
  TESSERA_CHECK(impl_->eod >= 0, "--tokenizer-type ", name(),
                " uses the model's eos piece as end of document, but the SentencePiece model '", impl_->path,
                "' has none (trained with eos_id -1)");
  return impl_->eod;
}

std::string_view SentencePieceTokenizer::name() const { return flavor_name(impl_->flavor); }
SentencePieceFlavor SentencePieceTokenizer::flavor() const { return impl_->flavor; }
int32_t SentencePieceTokenizer::bos() const { return impl_->bos; }
int32_t SentencePieceTokenizer::eos() const { return impl_->eos; }
int32_t SentencePieceTokenizer::pad() const { return impl_->pad; }
int32_t SentencePieceTokenizer::unk() const { return impl_->sp.unk_id(); }
int32_t SentencePieceTokenizer::cls() const { return impl_->cls; }
int32_t SentencePieceTokenizer::sep() const { return impl_->sep; }
int32_t SentencePieceTokenizer::mask() const { return impl_->mask; }
int32_t SentencePieceTokenizer::piece_size() const { return impl_->pieces; }
const std::string& SentencePieceTokenizer::model_path() const { return impl_->path; }

std::string SentencePieceTokenizer::id_to_piece(int32_t id) const {
  const Impl& m = *impl_;
  TESSERA_CHECK(id >= 0 && id < m.vocab_size(), "token id ", id, " is outside the vocabulary [0, ",
                m.vocab_size(), ") of ", name(), " '", m.path, "'");
  if (id < m.pieces) return m.sp.IdToPiece(id);
  return m.added[static_cast<size_t>(id - m.pieces)];
}

// ---------------------------------------------------------------------------------------------------
// Training.

namespace {

// Feeds SentencePiece the lines of the input files in order, as its own spm_train reads them
// (std::getline: '\n' ends a line and is dropped, nothing else is stripped).
class FileLines final : public sentencepiece::SentenceIterator {
 public:
  explicit FileLines(const std::vector<std::string>& files) : files_(files) { Next(); }
  bool done() const override { return done_; }
  void Next() override {
    for (;;) {
      if (in_.is_open() && std::getline(in_, line_)) {
        if (!line_.empty()) ++nonempty_lines_;
        return;
      }
      if (in_.is_open()) {
        if (in_.bad()) {
          error_ = str_cat("--input: error reading '", files_[index_ - 1], "'");
          done_ = true;
          return;
        }
        in_.close();
      }
      if (index_ == files_.size()) {
        done_ = true;
        return;
      }
      in_.clear();
      in_.open(files_[index_++], std::ios::binary);
      if (!in_) {
        error_ = str_cat("--input: cannot open '", files_[index_ - 1], "'");
        done_ = true;
        return;
      }
    }
  }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override {
    if (error_.empty()) return {};
    return sentencepiece::util::Status(sentencepiece::util::StatusCode::kInternal, error_);
  }
  const std::string& error() const { return error_; }
  int64_t nonempty_lines() const { return nonempty_lines_; }

 private:
  const std::vector<std::string>& files_;
  size_t index_ = 0;
  std::ifstream in_;
  std::string line_;
  bool done_ = false;
  std::string error_;
  int64_t nonempty_lines_ = 0;
};

const char* bool_str(bool b) { return b ? "true" : "false"; }

}  // namespace

void validate_sentencepiece_train_options(const SentencePieceTrainOptions& o) {
  TESSERA_CHECK(!o.input.empty(), "--input: give at least one text file to train on");
  std::error_code ec;
  for (const auto& path : o.input) {
    TESSERA_CHECK(!path.empty(), "--input: an empty file name");
    TESSERA_CHECK(fs::exists(path, ec), "--input: '", path, "' does not exist");
    TESSERA_CHECK(fs::is_regular_file(path, ec), "--input: '", path, "' is not a regular file");
    std::ifstream probe(path, std::ios::binary);
    TESSERA_CHECK(probe.good(), "--input: cannot read '", path, "'");
  }
  TESSERA_CHECK(!o.model_prefix.empty(), "--model-prefix: give the output path without extension "
                "(writes PREFIX.model and PREFIX.vocab)");
  {
    const fs::path prefix(o.model_prefix);
    TESSERA_CHECK(prefix.has_filename(), "--model-prefix '", o.model_prefix,
                  "' must name a file, not end in a directory separator");
    const fs::path dir = prefix.parent_path().empty() ? fs::path(".") : prefix.parent_path();
    TESSERA_CHECK(fs::is_directory(dir, ec), "--model-prefix '", o.model_prefix, "': directory '", dir.string(),
                  "' does not exist");
  }
  TESSERA_CHECK(o.model_type == "bpe" || o.model_type == "unigram", "--model-type must be bpe or unigram, got '",
                o.model_type, "'");
  TESSERA_CHECK(o.character_coverage >= 0.98 && o.character_coverage <= 1.0,
                "--character-coverage must be in [0.98, 1] (SentencePiece's range), got ", o.character_coverage);
  TESSERA_CHECK(o.input_sentence_size == 0 || o.input_sentence_size > 100,
                "--input-sentence-size must be 0 (all lines) or more than 100, got ", o.input_sentence_size);
  TESSERA_CHECK(o.max_sentence_length >= 10 && o.max_sentence_length <= (1 << 30),
                "--max-sentence-length must be in [10, 1073741824] bytes, got ", o.max_sentence_length);
  TESSERA_CHECK(o.num_threads >= 0 && o.num_threads <= 1024, "--num-threads must be in [0, 1024] (0: all cores), got ",
                o.num_threads);
  static const std::set<std::string> kRules = {"nmt_nfkc", "nfkc", "nmt_nfkc_cf", "nfkc_cf", "identity"};
  TESSERA_CHECK(kRules.count(o.normalization_rule_name),
                "--normalization-rule-name must be one of nmt_nfkc, nfkc, nmt_nfkc_cf, nfkc_cf, identity, got '",
                o.normalization_rule_name, "'");

  // Special ids: unk must exist; all defined ids distinct and inside the vocabulary.
  TESSERA_CHECK(o.vocab_size > 0, "--vocab-size must be positive, got ", o.vocab_size);
  TESSERA_CHECK(o.unk_id >= 0, "--unk-id must be >= 0 (SentencePiece models always have an unknown piece), got ",
                o.unk_id);
  const std::pair<const char*, int32_t> ids[] = {
      {"--unk-id", o.unk_id}, {"--bos-id", o.bos_id}, {"--eos-id", o.eos_id}, {"--pad-id", o.pad_id}};
  int32_t reserved = 0;
  for (size_t i = 0; i < std::size(ids); ++i) {
    if (ids[i].second == -1) continue;
    ++reserved;
    TESSERA_CHECK(ids[i].second >= 0 && ids[i].second < o.vocab_size, ids[i].first, " ", ids[i].second,
                  " must be -1 (none) or in [0, --vocab-size ", o.vocab_size, ")");
    for (size_t j = 0; j < i; ++j) {
      TESSERA_CHECK(ids[j].second != ids[i].second, ids[i].first, " and ", ids[j].first, " are both ",
                    ids[i].second, "; special ids must differ");
    }
  }
  std::set<std::string> symbols;
  for (const auto& s : o.user_defined_symbols) {
    TESSERA_CHECK(!s.empty(), "--user-defined-symbols: an empty symbol");
    // SentencePiece's key=value interface separates a list's items with commas.
    TESSERA_CHECK(s.find(',') == std::string::npos, "--user-defined-symbols: symbol '", s,
                  "' contains a comma, which SentencePiece cannot take");
    TESSERA_CHECK(symbols.insert(s).second, "--user-defined-symbols: '", s, "' is given twice");
  }
  reserved += static_cast<int32_t>(o.user_defined_symbols.size());
  if (o.byte_fallback) reserved += 256;
  TESSERA_CHECK(o.vocab_size > reserved, "--vocab-size ", o.vocab_size, " leaves no room for learned pieces: ",
                reserved, " are reserved (special ids, --user-defined-symbols",
                o.byte_fallback ? ", and 256 byte pieces for --byte-fallback" : "", ")");
}

SentencePieceTrainResult train_sentencepiece(const SentencePieceTrainOptions& o) {
  validate_sentencepiece_train_options(o);

  std::string symbols;
  for (const auto& s : o.user_defined_symbols) symbols += (symbols.empty() ? "" : ",") + s;
  const int32_t threads =
      o.num_threads > 0 ? o.num_threads : static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));

  // The key=value interface, not a command-line string: values are taken as they are (no quoting),
  // so paths with spaces are safe. The input is given through the iterator, not the `input` key.
  std::unordered_map<std::string, std::string> args = {
      {"model_prefix", o.model_prefix},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"model_type", o.model_type},
      {"input_sentence_size", std::to_string(o.input_sentence_size)},
      {"shuffle_input_sentence", bool_str(o.shuffle_input_sentence)},
      {"max_sentence_length", std::to_string(o.max_sentence_length)},
      {"num_threads", std::to_string(threads)},
      {"byte_fallback", bool_str(o.byte_fallback)},
      {"split_digits", bool_str(o.split_digits)},
      {"normalization_rule_name", o.normalization_rule_name},
      {"add_dummy_prefix", bool_str(o.add_dummy_prefix)},
      {"remove_extra_whitespaces", bool_str(o.remove_extra_whitespaces)},
      {"unk_id", std::to_string(o.unk_id)},
      {"bos_id", std::to_string(o.bos_id)},
      {"eos_id", std::to_string(o.eos_id)},
      {"pad_id", std::to_string(o.pad_id)},
      {"minloglevel", o.verbose ? "0" : "1"},
  };
  if (!symbols.empty()) args["user_defined_symbols"] = symbols;
  {
    std::ostringstream os;  // every digit of the coverage (operator<< alone keeps 6)
    os.precision(17);
    os << o.character_coverage;
    args["character_coverage"] = os.str();
  }

  // SentencePiece keeps its log level and random seed in globals; one training at a time.
  static std::mutex train_mutex;
  std::lock_guard<std::mutex> lock(train_mutex);
  sentencepiece::SetRandomGeneratorSeed(20240229);
  FileLines lines(o.input);
  auto status = sentencepiece::SentencePieceTrainer::Train(args, &lines);
  TESSERA_CHECK(lines.error().empty(), lines.error());
  if (!status.ok()) {
    TESSERA_CHECK(lines.nonempty_lines() > 0, "--input: no text to train on (every line of the input is empty)");
    std::string message = status.ToString();
    std::string hint;
    if (message.find("Vocabulary size") != std::string::npos) {  // "... too high (N). Please set it to ..."
      hint = " (lower --vocab-size or give more text)";
    }
    throw Error(str_cat("SentencePiece training of '", o.model_prefix, ".model' failed: ", message, hint));
  }
  return {o.model_prefix + ".model", o.model_prefix + ".vocab"};
}

}  // namespace tessera::data
