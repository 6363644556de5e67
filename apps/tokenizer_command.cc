// `tessera tokenizer train`: trains a SentencePiece BPE or unigram model, or a BERT WordPiece vocab.txt
// (--model-type wordpiece), on the user's text files.
#include <iostream>

#include "apps/command_line.h"
#include "apps/commands.h"
#include "core/check.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/wordpiece_trainer.h"

namespace tessera::apps {

int tokenizer_command(const std::vector<std::string>& args) {
  constexpr const char* kUsage = "usage: tessera tokenizer train --input FILE... --model-prefix PREFIX [--vocab-size N] "
                                 "[--model-type bpe|unigram|wordpiece] ... (tessera tokenizer train --help lists the flags)";
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    std::cout << kUsage << std::endl;
    return 0;
  }
  TESSERA_CHECK(!args.empty(), kUsage);
  TESSERA_CHECK(args[0] == "train", "tessera tokenizer: unknown subcommand '", args[0], "' (the subcommand is train); ",
                kUsage);
  data::SentencePieceTrainOptions o;
  data::WordPieceTrainOptions w;
  CLI::App app{"tessera tokenizer train: train a SentencePiece model or a WordPiece vocabulary",
               "tessera tokenizer train"};
  app.option_defaults()->always_capture_default();
  app.add_option("--input", o.input, "Plain-text files, one sentence per line")->required();
  app.add_option("--model-prefix", o.model_prefix,
                 "Writes PREFIX.model and PREFIX.vocab (wordpiece: PREFIX-vocab.txt)")->required();
  app.add_option("--vocab-size", o.vocab_size, "Pieces in the model, special ones included (wordpiece: 30000 "
                 "when not given)");
  app.add_option("--model-type", o.model_type, "bpe, unigram (SentencePiece) or wordpiece (BERT's vocab.txt)");
  // SentencePiece only.
  const std::vector<CLI::Option*> sentencepiece_only = {
      app.add_option("--character-coverage", o.character_coverage, "Fraction of characters covered"),
      app.add_option("--input-sentence-size", o.input_sentence_size, "Sample this many lines (0: all)"),
      app.add_option("--num-threads", o.num_threads, "Threads (0: all cores)"),
      app.add_flag("--byte-fallback", o.byte_fallback, "Unknown characters become byte pieces"),
      app.add_flag("--split-digits", o.split_digits, "Every digit its own piece"),
      app.add_option("--user-defined-symbols", o.user_defined_symbols, "Pieces that are never split"),
      app.add_option("--normalization-rule-name", o.normalization_rule_name, "nmt_nfkc, nfkc, identity, ..."),
      app.add_flag("--verbose", o.verbose, "SentencePiece's progress log")};
  // WordPiece only (Hugging Face's BertWordPieceTokenizer.train defaults).
  const std::vector<CLI::Option*> wordpiece_only = {
      app.add_flag("--lower-case,!--cased", w.lower_case,
                   "wordpiece: lowercase and strip accents (BertWordPieceLowerCase, the default) or not "
                   "(--cased: BertWordPieceCase)"),
      app.add_option("--min-frequency", w.min_frequency, "wordpiece: least count of a pair merged"),
      app.add_option("--limit-alphabet", w.limit_alphabet, "wordpiece: characters kept in the alphabet")};
  if (!parse_command_line(app, {args.begin() + 1, args.end()}, "tokenizer train")) return 0;

  TESSERA_CHECK(o.model_type == "bpe" || o.model_type == "unigram" || o.model_type == "wordpiece",
                "--model-type must be bpe, unigram or wordpiece, got '", o.model_type, "'");
  const bool wordpiece = o.model_type == "wordpiece";
  for (CLI::Option* opt : wordpiece ? sentencepiece_only : wordpiece_only) {
    TESSERA_CHECK(opt->count() == 0, opt->get_name(), " is not an option of --model-type ", o.model_type,
                  wordpiece ? " (it is SentencePiece's)" : " (it is for --model-type wordpiece)");
  }
  if (wordpiece) {
    w.input = o.input;
    w.model_prefix = o.model_prefix;
    if (app.count("--vocab-size")) w.vocab_size = o.vocab_size;
    data::WordPieceTrainResult result = data::train_wordpiece(w);
    // As Hugging Face's trainer, merging stops when no pair is left: a small input gives a small vocabulary,
    // smaller than the one asked for: say so, with both numbers.
    if (result.vocab_size < w.vocab_size)
      std::cerr << "WARNING: " << result.vocab_path << " has " << result.vocab_size << " pieces, fewer than --vocab-size "
                << w.vocab_size << ": the input has no more pairs to merge (give more text, or a lower --min-frequency)"
                << std::endl;
    std::cout << "wrote " << result.vocab_path << " (" << result.vocab_size << " pieces; --tokenizer-type "
              << (w.lower_case ? "BertWordPieceLowerCase" : "BertWordPieceCase") << " --vocab-file "
              << result.vocab_path << ")" << std::endl;
    return 0;
  }
  data::SentencePieceTrainResult result = data::train_sentencepiece(o);
  std::cout << "wrote " << result.model_path << " and " << result.vocab_path << std::endl;
  return 0;
}

}  // namespace tessera::apps
