// `tessera tokenizer train`: trains a SentencePiece BPE or unigram model on the user's text files.
#include <iostream>

#include "apps/command_line.h"
#include "apps/commands.h"
#include "core/check.h"
#include "data/sentencepiece_tokenizer.h"

namespace tessera::apps {

int tokenizer_command(const std::vector<std::string>& args) {
  TESSERA_CHECK(!args.empty() && args[0] == "train", "usage: tessera tokenizer train --input FILE... "
                "--model-prefix PREFIX [--vocab-size N] [--model-type bpe|unigram] ...");
  data::SentencePieceTrainOptions o;
  CLI::App app{"tessera tokenizer train: train a SentencePiece model", "tessera tokenizer train"};
  app.option_defaults()->always_capture_default();
  app.add_option("--input", o.input, "Plain-text files, one sentence per line")->required();
  app.add_option("--model-prefix", o.model_prefix, "Writes PREFIX.model and PREFIX.vocab")->required();
  app.add_option("--vocab-size", o.vocab_size, "Pieces in the model, special ones included");
  app.add_option("--model-type", o.model_type, "bpe or unigram");
  app.add_option("--character-coverage", o.character_coverage, "Fraction of characters covered");
  app.add_option("--input-sentence-size", o.input_sentence_size, "Sample this many lines (0: all)");
  app.add_option("--num-threads", o.num_threads, "Threads (0: all cores)");
  app.add_flag("--byte-fallback", o.byte_fallback, "Unknown characters become byte pieces");
  app.add_flag("--split-digits", o.split_digits, "Every digit its own piece");
  app.add_option("--user-defined-symbols", o.user_defined_symbols, "Pieces that are never split");
  app.add_option("--normalization-rule-name", o.normalization_rule_name, "nmt_nfkc, nfkc, identity, ...");
  app.add_flag("--verbose", o.verbose, "SentencePiece's progress log");
  if (!parse_command_line(app, {args.begin() + 1, args.end()}, "tokenizer train")) return 0;
  data::SentencePieceTrainResult result = data::train_sentencepiece(o);
  std::cout << "wrote " << result.model_path << " and " << result.vocab_path << std::endl;
  return 0;
}

}  // namespace tessera::apps
