// Megatron-LM's GPTDataset (megatron/core/datasets/gpt_dataset.py with helpers.cpp's
// build_sample_idx): fixed-length training samples cut from the token stream of a split's
// documents, visited in the same order as Megatron for the same seed.
//
// Three indices define the samples (all built once, then cached as .npy files):
//  - document index: the split's documents repeated once per epoch, shuffled with NumPy's
//    RandomState(seed). When the last epoch is needed for less than 80% of its samples it is
//    shuffled separately, so the partial epoch is not mixed into the full ones.
//  - sample index: for each sample boundary, (position in the document index, token offset).
//    A sample holds seq_length + 1 tokens and may span documents; consecutive samples share one
//    token (the last label of one is the first input of the next).
//  - shuffle index: a permutation of the samples; samples of a separate final epoch are shuffled
//    among themselves and come last.
//
// Version followed: Megatron-LM core (megatron/core/datasets) as of 2025, i.e. with
// add_extra_token_to_sequence = true and drop_last_partial_sequence = true (the defaults).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/indexed_dataset.h"
#include "data/numpy_random.h"

namespace tessera::data {

enum class Split { kTrain = 0, kValid = 1, kTest = 2 };
// Megatron's Split names: "train", "valid", "test".
const char* split_name(Split split);

// ---- --split ----

// Megatron's parse_and_normalize_split: up to three non-negative numbers separated by ',' (or '/'),
// missing ones 0, normalised to sum 1 as NumPy does it. Throws tessera::Error naming --split on a
// malformed string (empty, non-numbers, more than three, all zero).
std::array<double, 3> parse_split(std::string_view split);

// Megatron's convert_split_vector_to_split_matrix: each split's [begin, end) as fractions of the
// dataset, from the running sums of the weights; nullopt for a split with no share.
using SplitMatrix = std::array<std::optional<std::pair<double, double>>, 3>;
SplitMatrix split_matrix(const std::array<double, 3>& weights);

// The documents [begin, end) of each split in a dataset of `num_documents`, rounded as Megatron's
// _build_megatron_dataset_splits rounds them (Python's round: half to even).
using DocumentRange = std::pair<int64_t, int64_t>;
std::array<std::optional<DocumentRange>, 3> split_document_ranges(const SplitMatrix& matrix, int64_t num_documents);

// numpy.sum of a float64 vector (pairwise summation) and Megatron's normalize (w / sum(w)).
double numpy_sum(std::span<const double> values);
std::vector<double> normalize_weights(std::span<const double> weights);

// ---- index arrays ----

// An integer array in memory or memory-mapped from an .npy file. Megatron caches its indices as
// .npy; the files written here are byte-identical to numpy.save's (format 1.0).
class NpyArray {
 public:
  enum class Type { kInt16, kInt32, kUInt32, kInt64 };

  NpyArray() = default;
  template <typename T>
  static NpyArray from_vector(std::vector<T> values, std::vector<int64_t> shape);
  // Maps `path`; throws tessera::Error naming it if the file is not a C-order .npy array of one of
  // the types above.
  static NpyArray load(const std::string& path);
  // Writes a temporary file beside `path` and renames it into place.
  void save(const std::string& path) const;

  Type type() const { return type_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t size() const { return size_; }
  // Element i of the flattened array.
  int64_t operator[](int64_t i) const {
    switch (type_) {
      case Type::kInt16: return static_cast<const int16_t*>(data_)[i];
      case Type::kInt32: return static_cast<const int32_t*>(data_)[i];
      case Type::kUInt32: return static_cast<const uint32_t*>(data_)[i];
      case Type::kInt64: return static_cast<const int64_t*>(data_)[i];
    }
    return 0;
  }

 private:
  Type type_ = Type::kInt64;
  std::vector<int64_t> shape_;
  int64_t size_ = 0;
  const void* data_ = nullptr;
  std::shared_ptr<const void> owner_;  // the vector or the MappedFile that holds data_
};

// ---- cache files (shared by the datasets that cache indices) ----

// 64-bit FNV-1a as 16 hex digits: names cache files; the full description stored beside them
// guards collisions.
std::string fnv1a_hex(const std::string& s);
// Writes a temporary file beside `path` and renames it into place; throws tessera::Error naming it.
void write_file_atomically(const std::string& path, const std::string& bytes);
std::string read_text_file(const std::string& path);

// ---- the algorithm, as free functions (tested one by one against a Python transcription) ----

// _get_num_epochs: epochs until num_samples * seq_length + 1 tokens are covered (1 for nullopt).
int64_t gpt_num_epochs(int64_t tokens_per_epoch, std::optional<int64_t> num_samples, int64_t seq_length);

// The separate_final_epoch rule of _build_document_sample_shuffle_indices. Also returns the
// number of samples before the final epoch, which bounds the first shuffle range.
struct EpochPlan {
  int64_t num_epochs = 1;
  bool separate_final_epoch = false;
  int64_t num_samples_sans_final_epoch = 0;
};
EpochPlan gpt_epoch_plan(int64_t tokens_per_epoch, std::optional<int64_t> num_samples, int64_t seq_length);

// _build_document_index: `documents` repeated num_epochs times and shuffled (the last epoch
// separately when separate_final_epoch).
std::vector<int32_t> build_document_index(std::span<const int32_t> documents, int64_t num_epochs,
                                          NumpyRandomState& rng, bool separate_final_epoch);

// helpers.cpp build_sample_idx (drop_last_partial_sequence, add_extra_token_to_sequence): rows of
// (document-index position, offset), flattened, num_samples + 1 rows. `sizes` holds every
// sequence's length in the dataset.
std::vector<int64_t> build_sample_index(std::span<const int32_t> sizes, std::span<const int32_t> document_index,
                                        int64_t seq_length, int64_t num_epochs, int64_t tokens_per_epoch);

// _build_shuffle_index: [0, num_samples) shuffled, then [num_samples, total_size) shuffled.
std::vector<int64_t> build_shuffle_index(int64_t num_samples, int64_t total_size, NumpyRandomState& rng);

// ---- datasets ----

// What the trainer samples from: a fixed number of samples of seq_length + 1 tokens
// (inputs are tokens [0, L), labels tokens [1, L]).
class TokenDataset {
 public:
  virtual ~TokenDataset() = default;
  virtual int64_t size() const = 0;
  virtual int64_t seq_length() const = 0;
  // Fills `out` (seq_length() + 1 tokens) with sample `index`; throws on an index out of range.
  virtual void get(int64_t index, std::span<int32_t> out) const = 0;
  std::vector<int32_t> get(int64_t index) const {
    std::vector<int32_t> out(static_cast<size_t>(seq_length() + 1));
    get(index, out);
    return out;
  }
};

struct GptDatasetConfig {
  int64_t seq_length = 0;          // --seq-length
  uint32_t seed = 1234;            // --seed (Megatron's default)
  std::string split = "969, 30, 1";  // --split, recorded in the cache description
  // --data-cache-path; empty means Megatron's default, <prefix>/cache/GPTDataset_indices.
  std::string cache_dir;
  bool use_cache = true;
  int64_t vocab_size = 0;  // the tokenizer's: get() refuses a token id outside it (0: not checked)
};

// What to do when a split of --split's shares gets no documents or too few tokens: the corpus is too
// small for the split (a quick test on a few documents against Megatron's default 969,30,1, say).
// Empty without --split (the per-split paths).
std::string small_corpus_hint(const std::string& split);

// A sample's token ids must lie in the tokenizer's vocabulary: one outside it means the dataset at
// `prefix` was preprocessed with another tokenizer, which would otherwise fail later (a bare target id
// in the loss) or, below the padded vocabulary, train on nonsense silently.
void check_token_ids(std::span<const int32_t> tokens, int64_t vocab_size, const std::string& prefix);

class GptDataset : public TokenDataset {
 public:
  // Samples from the sequences [documents.first, documents.second) of `dataset` (one split).
  // num_samples: how many the caller needs (more may be built: whole epochs are cut into
  // samples); nullopt for exactly one epoch. The indices are loaded from the cache when a valid
  // one exists, else built and cached (written atomically; a cache that cannot be written is
  // reported in cache_status(), not fatal).
  GptDataset(std::shared_ptr<const IndexedDataset> dataset, Split split, DocumentRange documents,
             std::optional<int64_t> num_samples, const GptDatasetConfig& config);

  int64_t size() const override { return shuffle_index_.size(); }
  int64_t seq_length() const override { return config_.seq_length; }
  void get(int64_t index, std::span<int32_t> out) const override;
  using TokenDataset::get;

  const IndexedDataset& indexed_dataset() const { return *dataset_; }
  Split split() const { return split_; }
  DocumentRange documents() const { return documents_; }
  std::optional<int64_t> num_samples_requested() const { return num_samples_; }
  const EpochPlan& epoch_plan() const { return plan_; }
  int64_t tokens_per_epoch() const { return tokens_per_epoch_; }

  const NpyArray& document_index() const { return document_index_; }
  const NpyArray& sample_index() const { return sample_index_; }  // [size() + 1, 2]
  const NpyArray& shuffle_index() const { return shuffle_index_; }

  // Megatron-style JSON description of this dataset; its hash names the cache files.
  const std::string& description() const { return description_; }
  // The cache files' common prefix: <dir>/<hash>-GPTDataset-<split>-
  const std::string& cache_prefix() const { return cache_prefix_; }
  // One line on where the indices came from (loaded, built and cached, built uncached and why).
  const std::string& cache_status() const { return cache_status_; }

 private:
  void build_indices();
  // Loads and validates the cached indices; returns "" on success or why they were not usable.
  std::string load_cached();
  void write_cache();
  void validate_indices() const;

  std::shared_ptr<const IndexedDataset> dataset_;
  Split split_;
  DocumentRange documents_;
  std::optional<int64_t> num_samples_;
  GptDatasetConfig config_;
  int64_t tokens_per_epoch_ = 0;
  EpochPlan plan_;
  NpyArray document_index_;
  NpyArray sample_index_;
  NpyArray shuffle_index_;
  std::string description_;
  std::string cache_prefix_;
  std::string cache_status_;
};

}  // namespace tessera::data
