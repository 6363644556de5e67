// `tessera tokenize`: text on stdin to token ids on stdout, one line of space-separated ids per input
// line; `--decode` turns such lines back into text. With `--whole-input` all of stdin (newlines
// included) is one text and gives one line of ids, and `--decode --whole-input` writes exactly the text
// those ids stand for, so a byte-level tokenizer (GPT-2's) gives a file back byte for byte. For
// scripting and for checking a tokenizer.
#include <iostream>
#include <iterator>

#include "apps/command_line.h"
#include "apps/commands.h"
#include "core/check.h"
#include "data/null_tokenizer.h"
#include "data/tokenizer_factory.h"

namespace tessera::apps {

int tokenize_command(const std::vector<std::string>& args) {
  data::TokenizerOptions tok;
  bool decode = false, whole_input = false;
  CLI::App app{"tessera tokenize: text on stdin to token ids on stdout", "tessera tokenize"};
  app.add_option("--tokenizer-type", tok.type, "GPT2BPETokenizer, SentencePieceTokenizer, NullTokenizer, ...")->required();
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
  // Ids on a line are read the way the NullTokenizer reads its text.
  data::NullTokenizer id_reader(tokenizer->vocab_size() - 1);
  if (whole_input) {
    const std::string input{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
    if (decode) {
      std::cout << tokenizer->decode(id_reader.encode(input)) << std::flush;
    } else {
      std::cout << id_reader.decode(tokenizer->encode(input)) << '\n';
    }
    return 0;
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    if (decode) {
      std::cout << tokenizer->decode(id_reader.encode(line)) << '\n';
    } else {
      std::cout << id_reader.decode(tokenizer->encode(line)) << '\n';
    }
  }
  return 0;
}

}  // namespace tessera::apps
