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

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/check.h"
#include "data/gpt_dataset.h"

namespace tessera::data {

struct DataBlend {
  std::vector<std::string> prefixes;
  std::optional<std::vector<double>> weights;  // as given (not normalised); nullopt if unweighted
};

// --data-path values. An odd count, or an even count whose every other value is not a number, is
// a list of prefixes; an even count alternating number, prefix is a weighted blend. Throws
// tessera::Error naming `flag` (--data-path, or --train-data-path and the like) for an empty list, a mix
// of the two forms, or negative, non-finite or all-zero weights.
DataBlend parse_data_path(std::span<const std::string> values, const std::string& flag = "--data-path");

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
  // --train-data-path, --valid-data-path, --test-data-path (instead of --data-path and --split): each
  // split from its own blend (empty: no such split), built by assemble_per_split.
  std::array<std::vector<std::string>, 3> split_data_path;
  std::string split = "969, 30, 1";    // --split (Megatron's default)
  int64_t seq_length = 0;              // --seq-length
  uint32_t seed = 1234;                // --seed
  std::string cache_path;              // --data-cache-path; empty: beside each dataset
  int64_t vocab_size = 0;              // the tokenizer's, to refuse data made with another (0: unchecked)
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
// BlendedMegatronDatasetBuilder builds them for `--data-path ... --split ...` (with split_data_path,
// for --train-data-path and the like, as assemble_per_split builds them): a single unweighted
// prefix gives GptDatasets directly; a weighted blend gives BlendedDatasets over GptDatasets of
// ceil(ceil(size * w) * (1 + surplus)) samples each, of size sum(ceil(size * w)); an unweighted
// list gives BlendedDatasets over one epoch of each, weighted by their lengths.
std::array<std::shared_ptr<const TokenDataset>, 3> build_gpt_datasets(const GptDataConfig& config,
                                                                      const std::array<int64_t, 3>& sizes);

// BlendedMegatronDatasetBuilder's assembly of the train, valid and test datasets, for any kind of
// dataset (GPT's token datasets, BERT's masked-LM ones). build_splits(prefix, matrix, counts) gives one
// prefix's datasets of the splits with a share in `matrix`, counts[i] samples each (nullopt: one epoch), null for a split
// that may be absent and has no documents. Several prefixes are blended as `Blended(parts, weights, size)`.
// A single unweighted prefix gives its datasets directly; a weighted blend builds ceil(ceil(size * w) *
// (1 + surplus)) samples of each part for a blend of sum(ceil(size * w)); an unweighted list one epoch of
// each, blended by their lengths.
template <typename Dataset, typename Blended, typename BuildSplits>
std::array<std::shared_ptr<const Dataset>, 3> assemble_splits(const DataBlend& blend, const SplitMatrix& matrix,
                                                              const std::array<int64_t, 3>& sizes, double surplus,
                                                              bool test_split_optional, const std::string& split,
                                                              const BuildSplits& build_splits) {
  using Splits = std::array<std::shared_ptr<const Dataset>, 3>;
  if (blend.prefixes.size() == 1 && !blend.weights)
    return build_splits(blend.prefixes[0], matrix, {sizes[0], sizes[1], sizes[2]});
  Splits result;
  const size_t n = blend.prefixes.size();
  std::vector<Splits> mid(n);
  if (blend.weights) {
    const std::vector<double> w = normalize_weights(*blend.weights);
    // _get_size_per_split_per_dataset: the samples used (target) and built (with surplus).
    std::vector<std::array<int64_t, 3>> target(n);
    for (size_t p = 0; p < n; ++p) {
      std::array<std::optional<int64_t>, 3> buffer;
      for (int i = 0; i < 3; ++i) {
        const double t = std::ceil(static_cast<double>(sizes[i]) * w[p]);
        target[p][i] = static_cast<int64_t>(t);
        buffer[i] = static_cast<int64_t>(std::ceil(t * (1.0 + surplus)));
      }
      mid[p] = build_splits(blend.prefixes[p], matrix, buffer);
    }
    for (int i = 0; i < 3; ++i) {
      if (!matrix[i]) continue;
      std::vector<std::shared_ptr<const Dataset>> parts;
      int64_t size = 0;
      for (size_t p = 0; p < n; ++p) {
        parts.push_back(mid[p][i]);
        size += target[p][i];
      }
      // A part is missing only when its split has no documents and no samples were asked of it.
      const auto missing = std::find(parts.begin(), parts.end(), nullptr);
      if (missing != parts.end()) {
        if (sizes[i] == 0 || (i == static_cast<int>(Split::kTest) && test_split_optional)) continue;
        throw Error(str_cat(blend.prefixes[static_cast<size_t>(missing - parts.begin())], ": the ",
                            split_name(static_cast<Split>(i)), " split",
                            split.empty() ? std::string() : str_cat(" (--split '", split, "')"), " has no documents"));
      }
      result[i] = std::make_shared<const Blended>(std::move(parts), w, size);
    }
    return result;
  }
  // Unweighted: one epoch of each, blended in proportion to their lengths.
  for (size_t p = 0; p < n; ++p)
    mid[p] = build_splits(blend.prefixes[p], matrix, {std::nullopt, std::nullopt, std::nullopt});
  for (int i = 0; i < 3; ++i) {
    if (!matrix[i]) continue;
    // Only an optional test split can be missing from a part (build_splits reports the others).
    if (std::any_of(mid.begin(), mid.end(), [i](const Splits& s) { return s[i] == nullptr; })) continue;
    std::vector<std::shared_ptr<const Dataset>> parts;
    std::vector<double> lengths;
    int64_t total = 0;
    for (size_t p = 0; p < n; ++p) {
      parts.push_back(mid[p][i]);
      lengths.push_back(static_cast<double>(mid[p][i]->size()));
      total += mid[p][i]->size();
    }
    result[i] = std::make_shared<const Blended>(std::move(parts), lengths, std::min(sizes[i], total));
  }
  return result;
}

// BlendedMegatronDatasetBuilder with blend_per_split (--train-data-path, --valid-data-path,
// --test-data-path): split i comes from its own blend, nullptr where it has none. Each split is built
// with Megatron's "split spoof": a split matrix giving split i the whole of every dataset ([0, 1) of its
// documents) and the other splits nothing, and sizes[i] samples asked of it alone; then as
// assemble_splits builds a split. A single prefix gives its dataset directly, even with a weight
// (Megatron tests len(prefixes) == 1 there, not the weights).
template <typename Dataset, typename Blended, typename BuildSplits>
std::array<std::shared_ptr<const Dataset>, 3> assemble_per_split(const std::array<std::optional<DataBlend>, 3>& blends,
                                                                 const std::array<int64_t, 3>& sizes, double surplus,
                                                                 const BuildSplits& build_splits) {
  std::array<std::shared_ptr<const Dataset>, 3> result;
  for (int i = 0; i < 3; ++i) {
    if (!blends[i]) continue;
    SplitMatrix spoof;
    spoof[i] = std::pair<double, double>(0.0, 1.0);
    std::array<int64_t, 3> spoof_sizes{0, 0, 0};
    spoof_sizes[i] = sizes[i];
    DataBlend blend = *blends[i];
    if (blend.prefixes.size() == 1) blend.weights.reset();
    result[i] = assemble_splits<Dataset, Blended>(blend, spoof, spoof_sizes, surplus, false, "", build_splits)[i];
  }
  return result;
}

// The per-split flags' names, in split order.
inline constexpr std::array<const char*, 3> kSplitDataPathFlags = {"--train-data-path", "--valid-data-path",
                                                                  "--test-data-path"};

// Each split's blend of --train-data-path, --valid-data-path, --test-data-path (nullopt where empty).
std::array<std::optional<DataBlend>, 3> parse_split_data_paths(const std::array<std::vector<std::string>, 3>& paths);

}  // namespace tessera::data
