// `tessera tokenize`: text on stdin to token ids on stdout, one line of space-separated ids per input
// line; `--decode` turns such lines back into text. With `--whole-input` all of stdin (newlines
// included) is one text and gives one line of ids, and `--decode --whole-input` writes exactly the text
// those ids stand for, so a byte-level tokenizer (GPT-2's) gives a file back byte for byte. For
// scripting and for checking a tokenizer.
#include <cctype>
#include <charconv>
#include <iostream>
#include <iterator>

#include "apps/command_line.h"
#include "apps/commands.h"
#include "core/check.h"
#include "data/null_tokenizer.h"
#include "data/tokenizer_factory.h"

namespace tessera::apps {
namespace {

// The ids of `text` (separated by whitespace). A word that is no id of the tokenizer is an error naming
// the line of stdin (0: the whole input), the word and the tokenizer's range.
std::vector<int32_t> read_ids(std::string_view text, int64_t line_number, const data::Tokenizer& tokenizer,
                              const std::string& tokenizer_type) {
  std::vector<int32_t> ids;
  for (size_t i = 0, end = 0; i < text.size(); i = end) {
    if (std::isspace(static_cast<unsigned char>(text[i]))) {
      end = i + 1;
      continue;
    }
    for (end = i; end < text.size() && !std::isspace(static_cast<unsigned char>(text[end]));) ++end;
    int32_t id = -1;
    auto [ptr, ec] = std::from_chars(text.data() + i, text.data() + end, id);
    TESSERA_CHECK(ec == std::errc() && ptr == text.data() + end && id >= 0 && id < tokenizer.vocab_size(),
                  "tokenize --decode: ", line_number > 0 ? str_cat("line ", line_number, " of ") : "", "stdin: '",
                  text.substr(i, end - i), "' is not a token id of ", tokenizer_type, " (0..",
                  tokenizer.vocab_size() - 1, ")");
    ids.push_back(id);
  }
  return ids;
}

}  // namespace

int tokenize_command(const std::vector<std::string>& args) {
  data::TokenizerOptions tok;
  bool decode = false, whole_input = false;
  CLI::App app{"tessera tokenize: text on stdin to token ids on stdout", "tessera tokenize"};
  app.add_option("--tokenizer-type", tok.type, "GPT2BPETokenizer, SentencePieceTokenizer, BertWordPieceLowerCase, NullTokenizer, ...")->required();
  app.add_option("--vocab-file", tok.vocab_file, "GPT-2 vocabulary (encoder.json)");
  app.add_option("--merge-file", tok.merge_file, "GPT-2 merges (vocab.bpe)");
  app.add_option("--tokenizer-model", tok.tokenizer_model, "SentencePiece model");
  app.add_option("--vocab-size", tok.vocab_size, "Vocabulary size of the NullTokenizer");
  app.add_flag("--decode", decode, "Read lines of ids, write the text they stand for");
  app.add_flag("--whole-input", whole_input,
               "Encode all of stdin, newlines included, as one text (one line of ids); with --decode, read "
               "all the ids of stdin and write their text with nothing added");
  if (!parse_command_line(app, args, "tokenize")) return 0;
  std::unique_ptr<data::Tokenizer> tokenizer = data::build_tokenizer(tok);
  data::NullTokenizer id_writer(tokenizer->vocab_size() - 1);  // writes ids as the NullTokenizer spells them
  if (whole_input) {
    const std::string input{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
    if (decode) {
      std::cout << tokenizer->decode(read_ids(input, 0, *tokenizer, tok.type)) << std::flush;
    } else {
      std::cout << id_writer.decode(tokenizer->encode(input)) << '\n';
    }
    return 0;
  }
  std::string line;
  for (int64_t line_number = 1; std::getline(std::cin, line); ++line_number) {
    if (decode) {
      std::cout << tokenizer->decode(read_ids(line, line_number, *tokenizer, tok.type)) << '\n';
    } else {
      std::cout << id_writer.decode(tokenizer->encode(line)) << '\n';
    }
  }
  return 0;
}

}  // namespace tessera::apps
