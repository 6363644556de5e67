// Megatron-LM's BERT pre-training samples (megatron/core/datasets/{bert_dataset,masked_dataset}.py
// with helpers.cpp's build_mapping), reproduced draw for draw: the same seed, --split and dataset give
// the same samples in the same order as Megatron's BERTMaskedWordPieceDataset.
//
//  - sample mapping (build_bert_sample_mapping): rows (first sentence, end sentence, target length)
//    of contiguous sentences of one document, packed up to a target length that is shortened with
//    probability --short-seq-prob (std::mt19937(seed)); documents with too few sentences, or with more
//    than one sentence and one longer than 512 tokens, are skipped; the rows are shuffled with
//    std::mt19937_64(seed + 1). Epochs are cut until the requested number of samples is reached, so
//    a dataset may hold more samples than asked for. Cached as .npy like the GPT indices.
//  - each sample (build_bert_sample), from numpy.random.RandomState((seed + index) % 2^32): the
//    sentence-order split into segments A and B (with the binary head; B swapped before A half the
//    time), truncation from either end to the target length, [CLS] A [SEP] B [SEP], and Megatron's
//    whole-word n-gram masking (n <= 3, P(n) ~ 1/n) of about --mask-prob of the tokens with the
//    80/10/10 rule.
//
// The masking needs three facts about the vocabulary (MaskingVocabulary), not a tokenizer: the
// special ids, which pieces continue a word ("##" pieces of WordPiece), and the ids random
// replacements are drawn from.
//
// Version followed: Megatron-LM core as of 2025, with pretrain_bert.py's fixed masking options
// (masking_max_ngram 3, masking_do_full_word, no permutation, no longer-n-gram preference, no
// geometric distribution).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "data/blended_dataset.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
#include "data/numpy_random.h"

namespace tessera::data {

// ---- the vocabulary as the masking sees it ----

struct MaskingVocabulary {
  int32_t cls = -1;
  int32_t sep = -1;
  int32_t mask = -1;
  int32_t pad = -1;
  // By token id: the token's text starts with "##" (it continues the word of the piece before).
  std::vector<bool> continues_word;
  // The ids a random replacement is drawn from, in order: Megatron's token_lookup,
  // list(tokenizer.inv_vocab.keys()).
  std::vector<int32_t> ids;
};

// The vocabulary of ids [0, vocab_size) whose texts `token_text` gives, with the special ids;
// `ids` is 0, 1, ..., vocab_size - 1, which is list(inv_vocab.keys()) of Megatron's BERT tokenizers
// (a vocabulary file read line by line, extra tokens appended). Throws tessera::Error when a
// special id is outside the vocabulary.
MaskingVocabulary make_masking_vocabulary(int32_t vocab_size, const std::function<std::string(int32_t)>& token_text,
                                          int32_t cls, int32_t sep, int32_t mask, int32_t pad);

// ---- helpers.cpp build_mapping ----

// A document with more than one sentence and a sentence longer than this is skipped.
inline constexpr int32_t kBertLongSentenceLength = 512;

// helpers.cpp build_mapping: `document_boundaries` are the sentence indices at which the split's
// documents start, followed by the end of the last one (document_indices[first .. last + 1]);
// `sizes` every sentence's length in the dataset. Returns the rows (first sentence, end sentence,
// target length), flattened, shuffled. Epochs are cut while fewer than `max_num_samples` rows exist
// at an epoch's start, at most `num_epochs`. Megatron loops over 2^31 epochs when an epoch gives no
// row; here that is a tessera::Error saying why.
std::vector<int64_t> build_bert_sample_mapping(std::span<const int64_t> document_boundaries,
                                               std::span<const int32_t> sizes, int32_t num_epochs,
                                               uint64_t max_num_samples, int32_t max_seq_length,
                                               double short_seq_prob, int32_t seed, int32_t min_num_sent);

// ---- one sample ----

// masked_dataset.py _create_masked_lm_predictions with pretrain_bert.py's options: the masked tokens
// and the (position, original id) of every masked token, by position.
struct MaskedLmPredictions {
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;
  std::vector<int32_t> labels;
};
MaskedLmPredictions create_masked_lm_predictions(std::span<const int32_t> tokens, int64_t target_seq_length,
                                                 double mask_prob, const MaskingVocabulary& vocab,
                                                 NumpyRandomState& rng);

// BERTMaskedWordPieceDataset.__getitem__'s dictionary, each array seq_length long.
struct BertSample {
  std::vector<int32_t> tokens;        // "text": [CLS] A [SEP] (B [SEP]) after masking, then pad ids
  std::vector<int32_t> types;         // 0 for [CLS] A [SEP], 1 for B [SEP]; the pad id beyond (as Megatron)
  std::vector<int32_t> labels;        // the original id at masked positions, -1 elsewhere
  std::vector<float> loss_mask;       // 1 at masked positions, 0 elsewhere
  std::vector<int32_t> padding_mask;  // 1 over the tokens; the pad id beyond (as Megatron; 0 for BERT vocabularies)
  int32_t is_random = 0;              // the segments were swapped (sentence-order prediction target)
  bool truncated = false;
};

struct BertSampleOptions {
  int64_t seq_length = 0;     // --seq-length
  uint32_t seed = 1234;       // --seed
  double mask_prob = 0.15;    // --mask-prob
  bool binary_head = true;    // --bert-binary-head (off: --bert-no-binary-head)
};

// The sample at `index` of a dataset whose mapping row holds `sentences` and `target_seq_length`.
BertSample build_bert_sample(std::span<const std::vector<int32_t>> sentences, int64_t target_seq_length,
                             int64_t index, const BertSampleOptions& options, const MaskingVocabulary& vocab);

// ---- datasets ----

// What a BERT trainer samples from.
class MaskedLmDataset {
 public:
  virtual ~MaskedLmDataset() = default;
  virtual int64_t size() const = 0;
  virtual int64_t seq_length() const = 0;
  // Throws tessera::Error on an index out of range.
  virtual BertSample get(int64_t index) const = 0;
};

struct BertDatasetConfig {
  int64_t seq_length = 0;       // --seq-length (at least 5: [CLS], two [SEP] and two tokens)
  uint32_t seed = 1234;         // --seed, 1 to 2^31 - 1 (helpers.cpp takes an int and asserts seed > 0)
  double mask_prob = 0.15;      // --mask-prob, in (0, 1)
  double short_seq_prob = 0.1;  // --short-seq-prob, in [0, 1]
  bool binary_head = true;      // --bert-binary-head: two segments per sample, at least two sentences
  std::string split = "969, 30, 1";  // --split, recorded in the cache description
  // --data-cache-path; empty means Megatron's default, <prefix>/cache/BERTMaskedWordPieceDataset_indices.
  std::string cache_dir;
  bool use_cache = true;
};

class BertDataset : public MaskedLmDataset {
 public:
  // Samples from the documents [documents.first, documents.second) of `dataset` (one split), whose
  // sequences are sentences. num_samples: at least this many are built (whole epochs); nullopt for
  // one epoch. The mapping is loaded from the cache when a valid one exists, else built and cached
  // (atomically; a cache that cannot be written is reported in cache_status(), not fatal).
  BertDataset(std::shared_ptr<const IndexedDataset> dataset, Split split, DocumentRange documents,
              std::optional<int64_t> num_samples, const BertDatasetConfig& config,
              std::shared_ptr<const MaskingVocabulary> vocab);

  int64_t size() const override { return sample_index_.size() / 3; }
  int64_t seq_length() const override { return config_.seq_length; }
  BertSample get(int64_t index) const override;

  // Row i: first sentence, end sentence (exclusive), target length. uint32 [size(), 3], as Megatron's.
  const NpyArray& sample_index() const { return sample_index_; }
  Split split() const { return split_; }
  DocumentRange documents() const { return documents_; }
  const BertDatasetConfig& config() const { return config_; }
  // Megatron-style JSON description; its hash names the cache files.
  const std::string& description() const { return description_; }
  // The cache files' common prefix: <dir>/<hash>-BERTMaskedWordPieceDataset-
  const std::string& cache_prefix() const { return cache_prefix_; }
  const std::string& cache_status() const { return cache_status_; }

 private:
  void build_mapping();
  std::string load_cached();
  void validate_mapping() const;

  std::shared_ptr<const IndexedDataset> dataset_;
  Split split_;
  DocumentRange documents_;
  std::optional<int64_t> num_samples_;
  BertDatasetConfig config_;
  std::shared_ptr<const MaskingVocabulary> vocab_;
  NpyArray sample_index_;
  std::string description_;
  std::string cache_prefix_;
  std::string cache_status_;
};

// BlendedDataset over BERT datasets: sample i is sample dataset_sample_index[i] of dataset
// dataset_index[i] (build_blending_indices).
class BlendedMaskedLmDataset : public MaskedLmDataset {
 public:
  BlendedMaskedLmDataset(std::vector<std::shared_ptr<const MaskedLmDataset>> datasets, std::span<const double> weights,
                         int64_t size);
  int64_t size() const override { return size_; }
  int64_t seq_length() const override { return datasets_.front()->seq_length(); }
  BertSample get(int64_t index) const override;

  const std::vector<std::shared_ptr<const MaskedLmDataset>>& datasets() const { return datasets_; }
  const std::vector<double>& weights() const { return weights_; }
  const BlendingIndices& indices() const { return indices_; }

 private:
  std::vector<std::shared_ptr<const MaskedLmDataset>> datasets_;
  std::vector<double> weights_;
  int64_t size_;
  BlendingIndices indices_;
};

// Everything the BERT data flags say (Megatron's names).
struct BertDataConfig {
  std::vector<std::string> data_path;  // --data-path
  std::array<std::vector<std::string>, 3> split_data_path;  // as GptDataConfig's: --train-data-path ...
  std::string split = "969, 30, 1";    // --split
  int64_t seq_length = 0;              // --seq-length
  uint32_t seed = 1234;                // --seed
  std::string cache_path;              // --data-cache-path; empty: beside each dataset
  double mid_level_dataset_surplus = 0.005;  // --mid-level-dataset-surplus
  double mask_prob = 0.15;             // --mask-prob
  double short_seq_prob = 0.1;         // --short-seq-prob
  bool binary_head = true;             // --bert-binary-head / --bert-no-binary-head
  // As GptDataConfig::test_split_optional: a test split rounding to no documents is left out.
  bool test_split_optional = false;
};

// The train, valid and test datasets (nullptr for a split with no share), as
// BlendedMegatronDatasetBuilder builds BERTMaskedWordPieceDataset: --split divides each dataset's
// documents (not its sentences); a single unweighted prefix gives BertDatasets of sizes[i] samples
// (at least); a weighted blend gives blends over BertDatasets of ceil(ceil(size * w) * (1 + surplus))
// samples of size sum(ceil(size * w)); an unweighted list one epoch of each, blended by their lengths
// (Megatron's build_mapping cannot take that case's num_samples = None; one epoch is what it means).
std::array<std::shared_ptr<const MaskedLmDataset>, 3> build_bert_datasets(
    const BertDataConfig& config, const std::array<int64_t, 3>& sizes, std::shared_ptr<const MaskingVocabulary> vocab);

}  // namespace tessera::data
