// `tessera preprocess`: Megatron's tools/preprocess_data.py. Reads documents (jsonl lines, whole text
// files, or blank-line-separated paragraphs), tokenizes them on several threads and writes one
// indexed dataset per JSON key, {output_prefix}_{key}_document.bin/.idx, in Megatron's format. With
// --split-sentences (BERT's data) each sentence is one sequence and the document index marks where
// documents start, in {output_prefix}_{key}_sentence.bin/.idx (data/sentence_splitter.h splits).
// It streams: documents are read, tokenized and written a chunk at a time, so memory does not grow
// with the corpus (beyond Megatron's per-document index entries).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "data/sentence_splitter.h"
#include "data/tokenizer.h"

namespace tessera::data {

enum class InputFormat {
  Jsonl,       // one JSON object per line; the text of each --json-keys key is a document
  TextFiles,   // each input file is one document
  Paragraphs,  // documents separated by one or more blank lines
};

InputFormat parse_input_format(const std::string& name);  // "jsonl", "text", "paragraphs"

struct PreprocessOptions {
  std::vector<std::string> inputs;            // --input (several files for the plain-text formats)
  InputFormat format = InputFormat::Jsonl;    // --input-format
  std::vector<std::string> json_keys{"text"};  // --json-keys
  std::string output_prefix;                  // --output-prefix
  bool append_eod = false;                    // --append-eod (with sentences: after a document's last)
  bool split_sentences = false;               // --split-sentences: one sequence per sentence
  bool keep_newlines = false;                 // --keep-newlines: sentences keep the whitespace after them
  int workers = 1;                            // --workers: tokenizing threads
  bool skip_malformed = false;                // --skip-malformed: count bad lines instead of stopping
  int64_t chunk_documents = 2048;             // documents read and tokenized at a time
};

struct PreprocessProgress {
  int64_t documents = 0, tokens = 0, sentences = 0;
  int64_t bytes_read = 0, bytes_total = 0;  // of the input files
  int64_t skipped_malformed = 0, skipped_empty = 0;
  double seconds = 0;
};

// The output paths of one key: {prefix}_{key}_document, or {prefix}_{key}_sentence when split.
std::string output_dataset_prefix(const std::string& output_prefix, const std::string& key,
                                  bool split_sentences = false);

// The token ids of one text as preprocess writes them: with `splitter`, the tokens of each sentence
// back to back and each non-empty sentence's length in `lengths` (Megatron drops empty ones);
// without, the whole text as one sequence (one length, none if it has no tokens). `append_eod`
// appends the end-of-document id to a non-empty result, in its last sequence.
std::vector<int32_t> encode_document(std::string_view text, const Tokenizer& tokenizer,
                                     const SentenceSplitter* splitter, bool append_eod,
                                     std::vector<int64_t>& lengths);

// The texts of one jsonl line under `json_keys`, in their order, into `texts`. Returns "" on success,
// else what is wrong ("not a JSON object", "no key \"text\"", "a non-string value for key \"text\""),
// which preprocess() prefixes with file:line. Never throws for any bytes of `line`.
std::string parse_jsonl_line(std::string_view line, const std::vector<std::string>& json_keys,
                             std::vector<std::string>& texts);

// Runs the whole job; `progress` is called now and then and at the end. A malformed line (bad JSON,
// a missing key, a non-string value) is an Error naming the file and line, unless skip_malformed.
// Empty documents are skipped and counted (Megatron writes nothing for them either). `documents` and
// `tokens` count what was written; `sentences` the sequences (as many as documents unless split).
PreprocessProgress preprocess(const PreprocessOptions& options, const Tokenizer& tokenizer,
                              const std::function<void(const PreprocessProgress&)>& progress = {});

}  // namespace tessera::data
