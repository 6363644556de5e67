// `tessera preprocess` (Megatron's tools/preprocess_data.py), `tessera split-sentences` (its
// sentence-splitting pass alone: jsonl in, each key's text as a list of sentences out) and
// `tessera merge-datasets` (tools/merge_datasets.py).
#include <unistd.h>

#include <cctype>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/command_line.h"
#include "apps/commands.h"
#include "core/check.h"
#include "core/file_io.h"
#include "data/indexed_dataset.h"
#include "data/preprocess.h"
#include "data/sentence_splitter.h"
#include "data/tokenizer_factory.h"

namespace tessera::apps {
namespace {

// "12,345 documents, 2.1M tokens | 850 docs/s, 3.2 MB/s | 40% | 00:12 left"
std::string progress_line(const data::PreprocessProgress& p) {
  double mb = static_cast<double>(p.bytes_read) / 1e6, secs = std::max(p.seconds, 1e-9);
  double fraction = p.bytes_total > 0 ? static_cast<double>(p.bytes_read) / static_cast<double>(p.bytes_total) : 1;
  double left = fraction > 0 ? p.seconds * (1 - fraction) / fraction : 0;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%lld documents, %lld tokens | %.0f docs/s, %.2f MB/s | %3.0f%% | %02d:%02d left",
                static_cast<long long>(p.documents), static_cast<long long>(p.tokens),
                static_cast<double>(p.documents) / secs, mb / secs, 100 * fraction, static_cast<int>(left) / 60,
                static_cast<int>(left) % 60);
  return buf;
}

}  // namespace

int preprocess_command(const std::vector<std::string>& args) {
  data::PreprocessOptions o;
  data::TokenizerOptions tok;
  std::string format = "jsonl";
  CLI::App app{"tessera preprocess: text to Megatron .bin/.idx datasets", "tessera preprocess"};
  app.option_defaults()->always_capture_default();
  app.add_option("--input", o.inputs, "Input files (jsonl, or plain text with --input-format)")->required();
  app.add_option("--input-format", format, "jsonl, text (one document per file) or paragraphs (blank-line separated)");
  app.add_option("--json-keys", o.json_keys, "Keys of the jsonl objects to extract");
  app.add_option("--output-prefix", o.output_prefix,
                 "Writes PREFIX_KEY_document.bin/.idx (PREFIX_KEY_sentence with --split-sentences)")
      ->required();
  app.add_flag("--append-eod", o.append_eod, "Append the end-of-document id to every document");
  app.add_flag("--split-sentences", o.split_sentences,
               "Split documents into sentences: one sequence per sentence, documents in the index");
  app.add_flag("--keep-newlines", o.keep_newlines,
               "With --split-sentences: sentences keep the whitespace and newlines after them");
  app.add_option("--workers", o.workers, "Tokenizing threads");
  app.add_flag("--skip-malformed", o.skip_malformed, "Skip and count malformed lines instead of stopping");
  app.add_option("--tokenizer-type", tok.type, "GPT2BPETokenizer, SentencePieceTokenizer, BertWordPieceLowerCase, NullTokenizer, ...")
      ->required();
  app.add_option("--vocab-file", tok.vocab_file, "GPT-2 vocabulary (encoder.json)");
  app.add_option("--merge-file", tok.merge_file, "GPT-2 merges (vocab.bpe)");
  app.add_option("--tokenizer-model", tok.tokenizer_model, "SentencePiece model");
  app.add_option("--vocab-size", tok.vocab_size, "Vocabulary size of the NullTokenizer");
  if (!parse_command_line(app, args, "preprocess")) return 0;
  o.format = data::parse_input_format(format);
  TESSERA_CHECK(o.split_sentences || !o.keep_newlines, "--keep-newlines: only with --split-sentences");
  std::string type_lower = tok.type;
  for (char& c : type_lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (type_lower.starts_with("bert") && !o.split_sentences)  // as Megatron warns
    std::cerr << "Are you sure you don't want to split sentences? (a BERT tokenizer without --split-sentences)"
              << std::endl;
  std::unique_ptr<data::Tokenizer> tokenizer = data::build_tokenizer(tok);

  const bool terminal = ::isatty(STDERR_FILENO) == 1;
  data::PreprocessProgress done = data::preprocess(o, *tokenizer, [&](const data::PreprocessProgress& p) {
    std::cerr << (terminal ? "\r\033[K" : "") << progress_line(p) << (terminal ? "" : "\n") << std::flush;
  });
  if (terminal) std::cerr << "\n";
  // An empty dataset only fails later, in training ("the train split has no documents"): say it here.
  if (done.documents == 0) {
    std::string inputs;
    for (const std::string& in : o.inputs) inputs += str_cat(inputs.empty() ? "" : ", ", in);
    throw Error(str_cat("--input ", inputs, ": no documents to write (", done.skipped_empty, " empty, ",
                        done.skipped_malformed, " malformed skipped): the dataset would be empty"));
  }
  for (const std::string& key : o.json_keys)
    std::cout << "wrote " << data::output_dataset_prefix(o.output_prefix, key, o.split_sentences) << ".bin/.idx"
              << std::endl;
  std::cout << done.documents << " documents, ";
  if (o.split_sentences) std::cout << done.sentences << " sentences, ";
  std::cout << done.tokens << " tokens in " << done.seconds << " s";
  if (done.skipped_empty) std::cout << "; skipped " << done.skipped_empty << " empty documents";
  if (done.skipped_malformed) std::cout << "; skipped " << done.skipped_malformed << " malformed lines";
  std::cout << std::endl;
  return 0;
}

int split_sentences_command(const std::vector<std::string>& args) {
  std::string input, output;
  std::vector<std::string> keys{"text"};
  bool keep_newlines = false;
  CLI::App app{"tessera split-sentences: the sentences of jsonl documents, as preprocess --split-sentences "
               "splits them",
               "tessera split-sentences"};
  app.option_defaults()->always_capture_default();
  app.add_option("--input", input, "jsonl input")->required();
  app.add_option("--output", output, "jsonl output: one object per line, each key a list of sentences")->required();
  app.add_option("--json-keys", keys, "Keys of the jsonl objects to split");
  app.add_flag("--keep-newlines", keep_newlines, "Sentences keep the whitespace and newlines after them");
  if (!parse_command_line(app, args, "split-sentences")) return 0;
  std::ifstream in = open_input_file(input, "--input=" + input, std::ios::binary);
  AtomicOutputFile file(output, "--output=" + output);  // a malformed line leaves no partial output
  std::ofstream& out = file.stream();
  const data::SentenceSplitter splitter(keep_newlines);
  std::vector<std::string> texts;
  int64_t lines = 0, documents = 0, sentences = 0;
  for (std::string line; std::getline(in, line);) {
    ++lines;
    if (line.empty()) continue;
    std::string error = data::parse_jsonl_line(line, keys, texts);
    TESSERA_CHECK(error.empty(), input, ":", lines, ": ", error);
    nlohmann::json j = nlohmann::json::object();
    for (size_t k = 0; k < keys.size(); ++k) {
      nlohmann::json list = nlohmann::json::array();
      for (std::string_view s : splitter.split(texts[k])) list.push_back(std::string(s));
      sentences += static_cast<int64_t>(list.size());
      j[keys[k]] = std::move(list);
    }
    out << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    ++documents;
  }
  file.commit();
  std::cout << documents << " documents, " << sentences << " sentences -> " << output << std::endl;
  return 0;
}

int merge_datasets_command(const std::vector<std::string>& args) {
  std::string input, output_prefix;
  CLI::App app{"tessera merge-datasets: concatenate the .bin/.idx datasets of a directory",
               "tessera merge-datasets"};
  app.add_option("--input", input, "Directory holding the datasets to merge (sorted by name)")->required();
  app.add_option("--output-prefix", output_prefix, "Writes PREFIX.bin/.idx")->required();
  if (!parse_command_line(app, args, "merge-datasets")) return 0;
  std::vector<std::string> prefixes = data::find_dataset_prefixes(input);
  TESSERA_CHECK(!prefixes.empty(), "--input: no .bin/.idx datasets in ", input);
  data::merge_datasets(prefixes, output_prefix);
  std::cout << "merged " << prefixes.size() << " datasets into " << output_prefix << ".bin/.idx" << std::endl;
  return 0;
}

}  // namespace tessera::apps
