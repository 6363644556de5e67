// Training a BERT WordPiece vocabulary (vocab.txt) on a user's text: `tessera tokenizer train
// --model-type wordpiece`. The algorithm is Hugging Face's WordPieceTrainer (tokenizers'
// BertWordPieceTokenizer.train), which is BPE over the words of BERT's basic tokenizer with "##" marking
// pieces that continue a word:
//  1. Words: each input line through bert_basic_tokenize (the normaliser of the chosen casing and the
//     pre-tokeniser of bert_wordpiece_tokenizer.h), counted.
//  2. The vocabulary starts with the special pieces [PAD] [UNK] [CLS] [SEP] [MASK] (ids 0-4), then the
//     alphabet: the --limit-alphabet most frequent characters (weighted by word count), in code point
//     order. Characters outside it are dropped from the words, as Hugging Face does.
//  3. Each word becomes its characters, the first as itself and the others as "##c"; each such piece
//     not yet in the vocabulary is added, words taken in byte order.
//  4. Repeatedly, the most frequent adjacent pair (weighted by word count) is merged everywhere, and
//     the merged piece (the first piece followed by the second without its "##") added, until the
//     vocabulary has --vocab-size pieces or the best pair occurs fewer than --min-frequency times.
// Ties. Hugging Face breaks a tie between pairs by the smaller pair of ids, but its ids for "##"
// pieces (step 3) follow a hash map's order, so its output is not reproducible from run to run; here
// step 3 takes words in byte order and the tie goes to the smaller pair of ids, so training is
// deterministic. The ids in vocab.txt are the order in which pieces were added.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tessera::data {

struct WordPieceTrainOptions {
  std::vector<std::string> input;  // --input: plain-text files
  std::string model_prefix;        // --model-prefix: writes {prefix}-vocab.txt
  int32_t vocab_size = 30000;      // --vocab-size: pieces in vocab.txt, the 5 special ones included
  bool lower_case = true;          // --lower-case (BertWordPieceLowerCase) or --cased (BertWordPieceCase)
  int64_t min_frequency = 2;       // --min-frequency: a pair merged must occur at least this often
  int32_t limit_alphabet = 1000;   // --limit-alphabet: characters kept in the alphabet
};

struct WordPieceTrainResult {
  std::string vocab_path;  // {prefix}-vocab.txt
  int32_t vocab_size = 0;  // pieces written (fewer than asked when no pair is frequent enough)
};

// The special pieces every vocabulary starts with, in id order.
const std::vector<std::string>& wordpiece_special_pieces();

// Steps 2-4 on counted words (as bert_basic_tokenize gives them): the pieces in id order.
std::vector<std::string> train_wordpiece_vocab(const std::map<std::string, int64_t>& word_counts,
                                               const WordPieceTrainOptions& options);

// Validates the options (errors name the flag), counts the words of the input files (an unreadable
// file is an error naming it), trains and writes {prefix}-vocab.txt.
WordPieceTrainResult train_wordpiece(const WordPieceTrainOptions& options);

}  // namespace tessera::data
