// Megatron-LM's dataset blending and its top-level builder:
//  - `--data-path` parsing (get_blend_from_list): "p1" or "p1 p2 ..." (unweighted), or
//    "w1 p1 w2 p2 ..." (weighted);
//  - BlendedDataset (megatron/core/datasets/blended_dataset.py with helpers.cpp's
//    build_blending_indices): sample i comes from the dataset whose share so far lags its
//    weight the most;
//  - build_gpt_datasets, BlendedMegatronDatasetBuilder for one blend split by --split: the train,
//    valid and test datasets the trainer samples from.
// Version followed: Megatron-LM core as of 2025 (mid_level_dataset_surplus, blended size = sum of
// the per-dataset targets).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "data/gpt_dataset.h"

namespace tessera::data {

struct DataBlend {
  std::vector<std::string> prefixes;
  std::optional<std::vector<double>> weights;  // as given (not normalised); nullopt if unweighted
};

// --data-path values. An odd count, or an even count whose every other value is not a number, is
// a list of prefixes; an even count alternating number, prefix is a weighted blend. Throws
// tessera::Error naming --data-path for an empty list, a mix of the two forms, or negative,
// non-finite or all-zero weights.
DataBlend parse_data_path(std::span<const std::string> values);

// helpers.cpp build_blending_indices: for each of `size` samples, the dataset whose
// weight * max(i, 1) - count is largest (first on ties), and that dataset's running count.
struct BlendingIndices {
  std::vector<int16_t> dataset_index;
  std::vector<int64_t> dataset_sample_index;
};
BlendingIndices build_blending_indices(std::span<const double> weights, int64_t size);

class BlendedDataset : public TokenDataset {
 public:
  // `weights` are normalised here (again, as Megatron does for bitwise-identical weights).
  BlendedDataset(std::vector<std::shared_ptr<const TokenDataset>> datasets, std::span<const double> weights,
                 int64_t size);

  int64_t size() const override { return size_; }
  int64_t seq_length() const override { return datasets_.front()->seq_length(); }
  // Sample `dataset_sample_index[i]` of dataset `dataset_index[i]`; throws if that dataset is too
  // short (Megatron's surplus makes this rare; it would be an IndexError there).
  void get(int64_t index, std::span<int32_t> out) const override;
  using TokenDataset::get;

  const std::vector<std::shared_ptr<const TokenDataset>>& datasets() const { return datasets_; }
  const std::vector<double>& weights() const { return weights_; }
  const BlendingIndices& indices() const { return indices_; }

 private:
  std::vector<std::shared_ptr<const TokenDataset>> datasets_;
  std::vector<double> weights_;
  int64_t size_;
  BlendingIndices indices_;
};

// Everything the data flags say (the names are Megatron's flags).
struct GptDataConfig {
  std::vector<std::string> data_path;  // --data-path
  std::string split = "969, 30, 1";    // --split (Megatron's default)
  int64_t seq_length = 0;              // --seq-length
  uint32_t seed = 1234;                // --seed
  std::string cache_path;              // --data-cache-path; empty: beside each dataset
  double mid_level_dataset_surplus = 0.005;  // --mid-level-dataset-surplus
  // A test split whose share rounds to no documents (--split 949,50,1 over a small corpus) is left out
  // rather than an error, even when samples are asked of it: Megatron then has no test iterator.
  bool test_split_optional = false;
};

// Megatron's get_train_valid_test_num_samples: train_iters * gbs, (train_iters / eval_interval + 1)
// * eval_iters * gbs, eval_iters * gbs.
std::array<int64_t, 3> megatron_num_samples(int64_t train_iters, int64_t global_batch_size, int64_t eval_interval,
                                            int64_t eval_iters);

// The train, valid and test datasets (nullptr for a split with no share), built as Megatron's
// BlendedMegatronDatasetBuilder builds them for `--data-path ... --split ...`: a single unweighted
// prefix gives GptDatasets directly; a weighted blend gives BlendedDatasets over GptDatasets of
// ceil(ceil(size * w) * (1 + surplus)) samples each, of size sum(ceil(size * w)); an unweighted
// list gives BlendedDatasets over one epoch of each, weighted by their lengths.
std::array<std::shared_ptr<const TokenDataset>, 3> build_gpt_datasets(const GptDataConfig& config,
                                                                      const std::array<int64_t, 3>& sizes);

}  // namespace tessera::data
