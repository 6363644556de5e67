// SentencePiece tokenizers (Megatron's --tokenizer-type SentencePieceTokenizer, GPTSentencePieceTokenizer
// and Llama2Tokenizer, all with --tokenizer-model) and training a SentencePiece model on a user's text
// (`tessera tokenizer train`), through Debian's libsentencepiece (packages libsentencepiece-dev and
// libsentencepiece0; pkg-config module `sentencepiece`).
//
// The three tokenizer types read the same .model file and differ as Megatron-LM's classes do
// (megatron/training/tokenizer/tokenizer.py), so that datasets preprocessed by Megatron-LM keep their ids:
//
//  SentencePieceTokenizer (_SentencePieceTokenizer): the model's N pieces, then special tokens added in
//    this order when the model lacks a piece of that name: <CLS>, <SEP>, <EOD>, <MASK>, the pad piece
//    (<PAD> when the model has no pad id), the bos piece (<BOS> when none), the eos piece (<EOS> when
//    none), then <extra_id_0> .. <extra_id_{k-1}> for --vocab-extra-ids k. A default model (unk 0, bos 1,
//    eos 2, no pad) thus gets <CLS>=N, <SEP>=N+1, <EOD>=N+2, <MASK>=N+3, <PAD>=N+4, vocab_size() N+5;
//    <s>=1 and </s>=2 are special too.
//    eod() is the id of <EOD>, NOT the model's eos: that is what Megatron's class returns, and what
//    Megatron's `preprocess_data.py --append-eod` writes.
//    encode(): the text is cut at every occurrence of a special token's string (leftmost first; where
//    two start at the same byte, the one added first wins), each piece of text between them is encoded
//    by SentencePiece on its own, and each special token gives its id. So "a<EOD>b" is
//    encode("a"), <EOD>, encode("b").
//    decode(): runs of ordinary ids are decoded by SentencePiece; each special id adds " " + its string
//    + " " after the decoded run before it (Megatron's detokenize, from NeMo), so decode(encode(x)) is
//    not x where x holds special strings.
//  GPTSentencePieceTokenizer (_GPTSentencePieceTokenizer): SentencePiece's ids and text as they are;
//    vocab_size() is the model's piece count; eod() is the model's eos id.
//  Llama2Tokenizer (_Llama2Tokenizer): as GPTSentencePieceTokenizer, but encode() puts the model's bos id
//    first (Megatron's tokenize(s, bos=True, eos=False), which preprocess_data.py uses).
//
// Round trips. SentencePiece normalises text before encoding (by default the `nmt_nfkc` rule: NFKC,
// control characters removed, runs of whitespace collapsed to one space, leading and trailing
// whitespace removed) and maps characters outside the model's vocabulary to <unk>, which decodes to
// " ⁇ ". decode(encode(x)) is therefore SentencePiece's own DecodeIds(EncodeAsIds(x)), not always x. It
// is x for text that normalisation leaves unchanged and that the vocabulary covers. A model trained
// with normalization_rule_name "identity", remove_extra_whitespaces false and byte_fallback true gives
// decode(encode(x)) == x for all valid UTF-8 (tested with leading, trailing and repeated whitespace,
// newlines, emoji, CJK, combining marks; fuzzed by fuzz/sentencepiece_fuzzer.cc) except text holding
// U+2581 "▁": SentencePiece's stand-in for the space, it decodes to a space (found by fuzzing). Invalid UTF-8 is SentencePiece's business: each ill-formed
// byte is read as U+FFFD.
//
// encode() and decode() are const and safe to call from several threads at once (SentencePiece's
// processor is, once loaded).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace tessera::data {

enum class SentencePieceFlavor {
  kMegatron,  // --tokenizer-type SentencePieceTokenizer
  kGpt,       // --tokenizer-type GPTSentencePieceTokenizer
  kLlama2,    // --tokenizer-type Llama2Tokenizer
};

// The flavor a --tokenizer-type value names, or nullopt if it names none of the three.
std::optional<SentencePieceFlavor> sentencepiece_flavor_from_name(std::string_view tokenizer_type);

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // Loads a SentencePiece .model file. A missing, unreadable or malformed file is a tessera::Error
  // naming the path. vocab_extra_ids (Megatron's --vocab-extra-ids) is only for kMegatron; other
  // flavors reject a non-zero value, as Megatron fixes it at 0 for them. kLlama2 needs a model with a
  // bos piece.
  explicit SentencePieceTokenizer(const std::string& model_path,
                                  SentencePieceFlavor flavor = SentencePieceFlavor::kMegatron,
                                  int32_t vocab_extra_ids = 0);
  ~SentencePieceTokenizer() override;
  SentencePieceTokenizer(const SentencePieceTokenizer&) = delete;
  SentencePieceTokenizer& operator=(const SentencePieceTokenizer&) = delete;

  std::vector<int32_t> encode(std::string_view text) const override;
  // Throws tessera::Error on an id outside [0, vocab_size()).
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t vocab_size() const override;
  // kMegatron: the id of <EOD>. kGpt and kLlama2: the model's eos id; a model trained without one
  // (eos_id -1) makes eod() throw tessera::Error, since there is no id to end a document with.
  int32_t eod() const override;
  std::string_view name() const override;

  SentencePieceFlavor flavor() const;
  // Megatron's bos/eos/pad properties: kMegatron gives the ids of the bos/eos/pad tokens above (added
  // ones where the model has none); kGpt and kLlama2 give the model's ids, -1 where it has none.
  int32_t bos() const;
  int32_t eos() const;
  int32_t pad() const override;
  // The model's unknown-piece id (SentencePiece models always have one).
  int32_t unk() const;
  // Megatron's cls/sep/mask: the added tokens' ids for kMegatron, -1 for the other flavors.
  int32_t cls() const override;
  int32_t sep() const override;
  int32_t mask() const override;
  // The number of pieces in the .model file (vocab_size() less the added special tokens).
  int32_t piece_size() const;
  // The piece (or added special token) an id stands for, e.g. "▁the" or "<EOD>". Throws on a bad id.
  std::string id_to_piece(int32_t id) const;
  const std::string& model_path() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// `tessera tokenizer train`: the options of SentencePiece's spm_train that matter for a GPT corpus. The
// comments give the flag each option is meant to have; validation errors name those flags.
struct SentencePieceTrainOptions {
  std::vector<std::string> input;        // --input: plain-text files, one sentence per line
  std::string model_prefix;              // --model-prefix: writes {prefix}.model and {prefix}.vocab
  int32_t vocab_size = 32000;            // --vocab-size: pieces in the model, special ones included
  std::string model_type = "unigram";    // --model-type: bpe | unigram
  double character_coverage = 0.9995;    // --character-coverage: in [0.98, 1]; 1 keeps every character
  int64_t input_sentence_size = 0;       // --input-sentence-size: sample this many lines (0: use all)
  bool shuffle_input_sentence = true;    // --shuffle-input-sentence: sample at random, else the first
  int32_t max_sentence_length = 4192;    // --max-sentence-length: longer lines (bytes) are skipped
  int32_t num_threads = 0;               // --num-threads: 0 = hardware concurrency
  bool byte_fallback = false;            // --byte-fallback: unknown characters become <0xNN> byte pieces
  bool split_digits = false;             // --split-digits: every digit its own piece
  std::vector<std::string> user_defined_symbols;  // --user-defined-symbols: always single pieces
  std::string normalization_rule_name = "nmt_nfkc";  // --normalization-rule-name: nmt_nfkc | nfkc |
                                                     // nmt_nfkc_cf | nfkc_cf | identity
  bool add_dummy_prefix = true;          // --add-dummy-prefix: encode text as if it began with a space
  bool remove_extra_whitespaces = true;  // --remove-extra-whitespaces
  int32_t unk_id = 0;                    // --unk-id (must exist)
  int32_t bos_id = 1;                    // --bos-id (-1: none)
  int32_t eos_id = 2;                    // --eos-id (-1: none)
  int32_t pad_id = -1;                   // --pad-id (-1: none)
  bool verbose = false;                  // SentencePiece's progress log on stderr (else warnings only)
};

struct SentencePieceTrainResult {
  std::string model_path;  // {prefix}.model
  std::string vocab_path;  // {prefix}.vocab
};

// Validates the options (a broken rule is a tessera::Error naming the flag, its value and the rule),
// then trains with SentencePieceTrainer. The input files are read here, line by line (so any path works,
// commas and spaces included); an unreadable file is an error naming it. A corpus too small for the
// vocabulary, or another failure inside SentencePiece, is a tessera::Error carrying SentencePiece's
// message. Training is deterministic for given options and input.
SentencePieceTrainResult train_sentencepiece(const SentencePieceTrainOptions& options);

// The validation alone (train_sentencepiece runs it first).
void validate_sentencepiece_train_options(const SentencePieceTrainOptions& options);

}  // namespace tessera::data
