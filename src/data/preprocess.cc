#include "data/preprocess.h"

#include <omp.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/timer.h"
#include "data/indexed_dataset.h"

namespace tessera::data {
namespace {

// A raw document and where it came from (for error messages).
struct RawDocument {
  std::string text;  // a JSON line, or the document's text
  std::string file;
  int64_t line = 0;
};

// Reads the inputs a chunk of documents at a time, in order.
class DocumentReader {
 public:
  explicit DocumentReader(const PreprocessOptions& o) : options_(o) {
    for (const std::string& path : o.inputs) {
      TESSERA_CHECK(std::filesystem::is_regular_file(path), "--input: ", path, " is not a readable file");
      bytes_total_ += static_cast<int64_t>(std::filesystem::file_size(path));
    }
  }

  int64_t bytes_total() const { return bytes_total_; }
  int64_t bytes_read() const { return bytes_read_; }

  // Up to n more documents; empty at the end.
  std::vector<RawDocument> next(int64_t n) {
    std::vector<RawDocument> docs;
    while (static_cast<int64_t>(docs.size()) < n) {
      if (!in_.is_open() && !open_next()) break;
      if (options_.format == InputFormat::TextFiles) {
        std::string text((std::istreambuf_iterator<char>(in_)), std::istreambuf_iterator<char>());
        bytes_read_ += static_cast<int64_t>(text.size());
        docs.push_back({std::move(text), file_, 1});
        in_.close();
        continue;
      }
      std::string line;
      if (!std::getline(in_, line)) {
        if (!paragraph_.text.empty()) docs.push_back(std::move(paragraph_));
        paragraph_ = {};
        in_.close();
        continue;
      }
      ++line_;
      bytes_read_ += static_cast<int64_t>(line.size()) + 1;
      if (options_.format == InputFormat::Jsonl) {
        if (!line.empty()) docs.push_back({std::move(line), file_, line_});
        continue;
      }
      // Paragraphs: a blank line ends the current document.
      if (line.find_first_not_of(" \t\r") == std::string::npos) {
        if (!paragraph_.text.empty()) docs.push_back(std::move(paragraph_));
        paragraph_ = {};
      } else {
        if (paragraph_.text.empty()) paragraph_ = {"", file_, line_};
        else paragraph_.text += '\n';
        paragraph_.text += line;
      }
    }
    return docs;
  }

 private:
  bool open_next() {
    if (next_file_ >= options_.inputs.size()) return false;
    file_ = options_.inputs[next_file_++];
    in_.open(file_, std::ios::binary);
    TESSERA_CHECK(in_.is_open(), "--input: cannot open ", file_);
    line_ = 0;
    return true;
  }

  const PreprocessOptions& options_;
  size_t next_file_ = 0;
  std::ifstream in_;
  std::string file_;
  int64_t line_ = 0;
  RawDocument paragraph_;
  int64_t bytes_total_ = 0, bytes_read_ = 0;
};

// One document tokenized: ids and sequence lengths per key, or the reason it was rejected.
struct TokenizedDocument {
  std::vector<std::vector<int32_t>> ids;      // one per key
  std::vector<std::vector<int64_t>> lengths;  // one per key: the sequences of ids
  std::string error;
};

TokenizedDocument tokenize(const RawDocument& doc, const PreprocessOptions& o, const Tokenizer& tokenizer,
                           const SentenceSplitter* splitter) {
  TokenizedDocument out;
  std::vector<std::string> texts;
  if (o.format == InputFormat::Jsonl) {
    std::string error = parse_jsonl_line(doc.text, o.json_keys, texts);
    if (!error.empty()) {
      out.error = str_cat(doc.file, ":", doc.line, ": ", error);
      return out;
    }
  } else {
    texts.push_back(doc.text);
  }
  // This runs on the OpenMP workers, where an escaping exception would terminate the process (and leave
  // the builders' temporary files): a text the tokenizer refuses is reported like a malformed line.
  try {
    for (const std::string& text : texts) {
      out.lengths.emplace_back();
      out.ids.push_back(encode_document(text, tokenizer, splitter, o.append_eod, out.lengths.back()));
    }
  } catch (const std::exception& e) {
    out = {};
    out.error = str_cat(doc.file, ":", doc.line, ": ", e.what());
  }
  return out;
}

}  // namespace

std::vector<int32_t> encode_document(std::string_view text, const Tokenizer& tokenizer,
                                     const SentenceSplitter* splitter, bool append_eod,
                                     std::vector<int64_t>& lengths) {
  lengths.clear();
  std::vector<int32_t> ids;
  if (splitter) {
    for (std::string_view sentence : splitter->split(text)) {
      std::vector<int32_t> s = tokenizer.encode(sentence);
      if (s.empty()) continue;
      ids.insert(ids.end(), s.begin(), s.end());
      lengths.push_back(static_cast<int64_t>(s.size()));
    }
  } else {
    ids = tokenizer.encode(text);
    if (!ids.empty()) lengths.push_back(static_cast<int64_t>(ids.size()));
  }
  if (!ids.empty() && append_eod) {
    ids.push_back(tokenizer.eod());
    ++lengths.back();
  }
  return ids;
}

std::string parse_jsonl_line(std::string_view line, const std::vector<std::string>& json_keys,
                             std::vector<std::string>& texts) {
  texts.clear();
  nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return "not a JSON object";
  for (const std::string& key : json_keys) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_string()) {
      texts.clear();
      return str_cat(it == j.end() ? "no key" : "a non-string value for key", " \"", key, "\"");
    }
    texts.push_back(it->get<std::string>());
  }
  return "";
}

InputFormat parse_input_format(const std::string& name) {
  if (name == "jsonl") return InputFormat::Jsonl;
  if (name == "text") return InputFormat::TextFiles;
  if (name == "paragraphs") return InputFormat::Paragraphs;
  throw Error(str_cat("--input-format=", name, ": must be jsonl, text or paragraphs"));
}

std::string output_dataset_prefix(const std::string& output_prefix, const std::string& key, bool split_sentences) {
  return str_cat(output_prefix, "_", key, split_sentences ? "_sentence" : "_document");
}

PreprocessProgress preprocess(const PreprocessOptions& o, const Tokenizer& tokenizer,
                              const std::function<void(const PreprocessProgress&)>& progress) {
  TESSERA_CHECK(!o.inputs.empty(), "--input: no input files");
  TESSERA_CHECK(!o.output_prefix.empty(), "--output-prefix is required");
  TESSERA_CHECK(o.workers >= 1, "--workers=", o.workers, ": must be at least 1");
  TESSERA_CHECK(!o.json_keys.empty(), "--json-keys: at least one key");
  for (size_t k = 0; k < o.json_keys.size(); ++k)  // two builders of one key would write the same files
    TESSERA_CHECK(std::find(o.json_keys.begin(), o.json_keys.begin() + k, o.json_keys[k]) == o.json_keys.begin() + k,
                  "--json-keys: '", o.json_keys[k], "' is given twice (each key writes PREFIX_KEY_document.bin/.idx)");
  TESSERA_CHECK(o.format == InputFormat::Jsonl || o.json_keys.size() == 1, "--json-keys: plain-text input has ",
                "one document text; give a single key (it names the output)");
  TESSERA_CHECK(o.split_sentences || !o.keep_newlines, "--keep-newlines: only with --split-sentences");
  DocumentReader reader(o);
  const SentenceSplitter splitter(o.keep_newlines);
  const SentenceSplitter* split = o.split_sentences ? &splitter : nullptr;
  std::vector<std::unique_ptr<IndexedDatasetBuilder>> builders;
  for (const std::string& key : o.json_keys)
    builders.push_back(std::make_unique<IndexedDatasetBuilder>(
        output_dataset_prefix(o.output_prefix, key, o.split_sentences), best_dtype(tokenizer.vocab_size())));
  PreprocessProgress p;
  p.bytes_total = reader.bytes_total();
  Timer timer, since_report;
  for (std::vector<RawDocument> chunk = reader.next(o.chunk_documents); !chunk.empty();
       chunk = reader.next(o.chunk_documents)) {
    std::vector<TokenizedDocument> done(chunk.size());
    // No more threads than documents: libgomp starts every thread asked for, and --workers 100000 crashed
    // the process (SIGSEGV) where Python's pool would have been merely slow to start.
    const int threads = static_cast<int>(std::min<int64_t>(o.workers, static_cast<int64_t>(chunk.size())));
#pragma omp parallel for num_threads(threads) schedule(dynamic, 16)
    for (size_t i = 0; i < chunk.size(); ++i) done[i] = tokenize(chunk[i], o, tokenizer, split);
    for (TokenizedDocument& d : done) {  // in input order
      if (!d.error.empty()) {
        TESSERA_CHECK(o.skip_malformed, d.error, " (--skip-malformed skips such lines)");
        ++p.skipped_malformed;
        continue;
      }
      bool empty = true;
      for (const auto& ids : d.ids) empty = empty && ids.empty();
      if (empty) {
        ++p.skipped_empty;
        continue;
      }
      for (size_t k = 0; k < d.ids.size(); ++k) {
        builders[k]->add_document(d.ids[k], d.lengths[k]);
        p.tokens += static_cast<int64_t>(d.ids[k].size());
        p.sentences += static_cast<int64_t>(d.lengths[k].size());
      }
      ++p.documents;
    }
    p.bytes_read = reader.bytes_read();
    p.seconds = timer.seconds();
    if (progress && since_report.seconds() >= 1.0) {
      progress(p);
      since_report.reset();
    }
  }
  for (auto& b : builders) b->finalize();
  p.bytes_read = reader.bytes_read();
  p.seconds = timer.seconds();
  if (progress) progress(p);
  return p;
}

}  // namespace tessera::data
