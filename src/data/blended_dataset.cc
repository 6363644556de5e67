#include "data/blended_dataset.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "core/check.h"

namespace tessera::data {

namespace {

std::string strip(const std::string& s) {
  const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  size_t b = 0, e = s.size();
  while (b < e && is_space(s[b])) ++b;
  while (e > b && is_space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

// Python's float() on a weight, for the forms anyone writes ("30", "0.3", "1e-3").
std::optional<double> parse_number(const std::string& text) {
  const std::string s = strip(text);
  double v = 0.0;
  const char* begin = s.data() + (!s.empty() && s[0] == '+' ? 1 : 0);
  auto [end, ec] = std::from_chars(begin, s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

DataBlend parse_data_path(std::span<const std::string> values, const std::string& flag) {
  TESSERA_CHECK(!values.empty(), flag, ": no dataset given");
  DataBlend blend;
  const auto all_prefixes = [&] {
    for (const std::string& v : values) blend.prefixes.push_back(strip(v));
  };
  if (values.size() % 2 == 1) {
    all_prefixes();
  } else {
    std::vector<double> weights;
    size_t numbers = 0, first_other = 0;
    for (size_t i = 0; i < values.size(); i += 2) {
      if (auto w = parse_number(values[i])) {
        weights.push_back(*w);
        ++numbers;
      } else if (numbers == i / 2) {
        first_other = i;  // the first non-number after only numbers
      }
    }
    if (numbers == 0) {
      all_prefixes();
    } else if (numbers != values.size() / 2) {
      throw Error(str_cat(flag, ": weights and prefixes must alternate ('w1 p1 w2 p2 ...'); '",
                          values[first_other], "' is not a weight"));
    } else {
      for (size_t i = 0; i < weights.size(); ++i) {
        TESSERA_CHECK(std::isfinite(weights[i]) && weights[i] >= 0, flag, ": weight '", values[2 * i],
                      "' must be a non-negative number");
        blend.prefixes.push_back(strip(values[2 * i + 1]));
      }
      TESSERA_CHECK(numpy_sum(weights) > 0, flag, ": the weights sum to zero");
      blend.weights = std::move(weights);
    }
  }
  for (const std::string& p : blend.prefixes) TESSERA_CHECK(!p.empty(), flag, ": empty dataset prefix");
  return blend;
}

namespace {
// weight * count - samples, with the product rounded before the subtraction. With FMA available
// (-march=native) the compiler could fuse the two and round once, which changes ties; Megatron's
// helpers.cpp is built for baseline x86-64, without FMA.
double blending_error(double weight, double at, int64_t count) {
  volatile double product = weight * at;
  return product - static_cast<double>(count);
}
}  // namespace

BlendingIndices build_blending_indices(std::span<const double> weights, int64_t size) {
  const size_t n = weights.size();
  TESSERA_CHECK(n > 0 && n < 32767, "blending needs 1 to 32766 datasets, got ", n);
  BlendingIndices out;
  out.dataset_index.resize(static_cast<size_t>(size));
  out.dataset_sample_index.resize(static_cast<size_t>(size));
  std::vector<int64_t> current(n, 0);
  for (int64_t s = 0; s < size; ++s) {
    const double s_double = std::max(static_cast<double>(s), 1.0);
    size_t best = 0;
    double best_error = blending_error(weights[0], s_double, current[0]);
    for (size_t d = 1; d < n; ++d) {
      const double error = blending_error(weights[d], s_double, current[d]);
      if (error > best_error) {
        best_error = error;
        best = d;
      }
    }
    out.dataset_index[s] = static_cast<int16_t>(best);
    out.dataset_sample_index[s] = current[best];
    ++current[best];
  }
  return out;
}

BlendedDataset::BlendedDataset(std::vector<std::shared_ptr<const TokenDataset>> datasets,
                               std::span<const double> weights, int64_t size)
    : datasets_(std::move(datasets)), weights_(normalize_weights(weights)), size_(size) {
  TESSERA_CHECK(!datasets_.empty() && datasets_.size() == weights.size(), "BlendedDataset: ", datasets_.size(),
                " datasets for ", weights.size(), " weights");
  TESSERA_CHECK(size_ >= 0, "BlendedDataset: negative size ", size_);
  for (const auto& d : datasets_) {
    TESSERA_CHECK(d != nullptr && d->seq_length() == datasets_.front()->seq_length(),
                  "BlendedDataset: datasets must exist and share a sequence length");
  }
  indices_ = build_blending_indices(weights_, size_);
}

void BlendedDataset::get(int64_t index, std::span<int32_t> out) const {
  TESSERA_CHECK(index >= 0 && index < size_, "blended dataset: sample ", index, " out of range [0, ", size_, ")");
  const auto& dataset = datasets_[static_cast<size_t>(indices_.dataset_index[index])];
  const int64_t sample = indices_.dataset_sample_index[index];
  TESSERA_CHECK(sample < dataset->size(), "blended dataset: sample ", index, " needs sample ", sample,
                " of dataset ", indices_.dataset_index[index], ", which has only ", dataset->size(),
                " (raise --mid-level-dataset-surplus)");
  dataset->get(sample, out);
}

std::array<int64_t, 3> megatron_num_samples(int64_t train_iters, int64_t global_batch_size, int64_t eval_interval,
                                            int64_t eval_iters) {
  const int64_t valid_iters = eval_interval > 0 ? (train_iters / eval_interval + 1) * eval_iters : 0;
  return {train_iters * global_batch_size, valid_iters * global_batch_size, eval_iters * global_batch_size};
}

std::array<std::shared_ptr<const TokenDataset>, 3> build_gpt_datasets(const GptDataConfig& config,
                                                                      const std::array<int64_t, 3>& sizes) {
  const auto per_split = parse_split_data_paths(config.split_data_path);
  const bool use_per_split = std::any_of(per_split.begin(), per_split.end(), [](const auto& b) { return b.has_value(); });
  // Megatron's config has split None with blend_per_split: the description records null.
  GptDatasetConfig gpt{config.seq_length, config.seed, use_per_split ? std::string() : config.split, config.cache_path,
                       true, config.vocab_size};

  // _build_megatron_dataset_splits: one IndexedDataset, a GptDataset per split with a share.
  const auto build_splits = [&](const std::string& prefix, const SplitMatrix& matrix,
                                const std::array<std::optional<int64_t>, 3>& counts) {
    auto indexed = std::make_shared<const IndexedDataset>(prefix);
    const auto ranges = split_document_ranges(matrix, indexed->num_sequences());
    std::array<std::shared_ptr<const TokenDataset>, 3> out;
    for (int i = 0; i < 3; ++i) {
      if (!matrix[i]) continue;
      // A split that rounds to no documents cannot give samples (Megatron loops forever there);
      // when none are asked for, it is simply absent, otherwise GptDataset reports it.
      const bool optional = counts[i] == 0 || (i == static_cast<int>(Split::kTest) && config.test_split_optional);
      if (ranges[i]->first == ranges[i]->second && optional) continue;
      out[i] = std::make_shared<const GptDataset>(indexed, static_cast<Split>(i), *ranges[i], counts[i], gpt);
    }
    return out;
  };
  if (use_per_split)
    return assemble_per_split<TokenDataset, BlendedDataset>(per_split, sizes, config.mid_level_dataset_surplus,
                                                            build_splits);
  const DataBlend blend = parse_data_path(config.data_path);
  const SplitMatrix matrix = split_matrix(parse_split(config.split));
  return assemble_splits<TokenDataset, BlendedDataset>(blend, matrix, sizes, config.mid_level_dataset_surplus,
                                                       config.test_split_optional, config.split, build_splits);
}

std::array<std::optional<DataBlend>, 3> parse_split_data_paths(const std::array<std::vector<std::string>, 3>& paths) {
  std::array<std::optional<DataBlend>, 3> blends;
  for (int i = 0; i < 3; ++i)
    if (!paths[i].empty()) blends[i] = parse_data_path(paths[i], kSplitDataPathFlags[i]);
  return blends;
}

}  // namespace tessera::data
