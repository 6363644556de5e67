#include "data/bert_dataset.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <utility>

#include "core/check.h"
#include "data/python_round.h"

namespace tessera::data {

namespace {

namespace fs = std::filesystem;

constexpr const char* kClassName = "BERTMaskedWordPieceDataset";
// pretrain_bert.py's masking_max_ngram.
constexpr int kMaxNgram = 3;

// numpy.random.RandomState.choice(arange(1, k + 1), p=q) with q = nprobs[:k] / nprobs[:k].sum(),
// nprobs = (1 / arange(1, 4)) / sum: the cumulative distribution choice searches, computed in
// NumPy's order (sums left to right, cdf /= cdf[-1]).
struct NgramCdf {
  std::array<double, kMaxNgram> cdf{};
  NgramCdf() {
    std::array<double, kMaxNgram> p{};
    double sum = 0.0;
    for (int n = 0; n < kMaxNgram; ++n) sum += (p[n] = 1.0 / static_cast<double>(n + 1));
    for (double& v : p) v /= sum;
    // choice's own normalisation of p[:n_ngrams] (Megatron's candidate entries always hold
    // masking_max_ngram n-grams, so n_ngrams is 3).
    double sum2 = 0.0;
    for (double v : p) sum2 += v;
    double running = 0.0;
    for (int n = 0; n < kMaxNgram; ++n) cdf[n] = (running += p[n] / sum2);
    const double last = cdf[kMaxNgram - 1];
    for (double& v : cdf) v /= last;
  }
  // searchsorted(cdf, u, side='right'), as n = index + 1.
  int draw(NumpyRandomState& rng) const {
    const double u = rng.random_sample();
    int i = 0;
    while (i < kMaxNgram - 1 && cdf[i] <= u) ++i;
    return i + 1;
  }
};

// BERTMaskedWordPieceDataset._get_token_mask: the replacement id, or nullopt to keep the token.
std::optional<int32_t> token_mask(const MaskingVocabulary& vocab, NumpyRandomState& rng) {
  if (rng.random_sample() < 0.8) return vocab.mask;
  if (rng.random_sample() >= 0.5)
    return vocab.ids[static_cast<size_t>(rng.randint(0, static_cast<int64_t>(vocab.ids.size())))];
  return std::nullopt;
}

// One segment during truncation: tokens [begin, end) of `tokens`.
struct Segment {
  std::vector<int32_t> tokens;
  size_t begin = 0;
  size_t end = 0;
  size_t size() const { return end - begin; }
};

}  // namespace

// ---- vocabulary ----

MaskingVocabulary make_masking_vocabulary(int32_t vocab_size, const std::function<std::string(int32_t)>& token_text,
                                          int32_t cls, int32_t sep, int32_t mask, int32_t pad) {
  TESSERA_CHECK(vocab_size > 0, "BERT masking: empty vocabulary");
  const auto in_range = [&](int32_t id, const char* name) {
    TESSERA_CHECK(id >= 0 && id < vocab_size, "BERT masking: the ", name, " id ", id, " is outside the vocabulary of ",
                  vocab_size);
  };
  in_range(cls, "[CLS]");
  in_range(sep, "[SEP]");
  in_range(mask, "[MASK]");
  in_range(pad, "[PAD]");
  MaskingVocabulary v;
  v.cls = cls;
  v.sep = sep;
  v.mask = mask;
  v.pad = pad;
  v.continues_word.resize(static_cast<size_t>(vocab_size));
  v.ids.resize(static_cast<size_t>(vocab_size));
  for (int32_t id = 0; id < vocab_size; ++id) {
    v.continues_word[static_cast<size_t>(id)] = token_text(id).starts_with("##");
    v.ids[static_cast<size_t>(id)] = id;
  }
  return v;
}

// ---- build_mapping ----

std::vector<int64_t> build_bert_sample_mapping(std::span<const int64_t> docs, std::span<const int32_t> sizes,
                                               int32_t num_epochs, uint64_t max_num_samples, int32_t max_seq_length,
                                               double short_seq_prob, int32_t seed, int32_t min_num_sent) {
  TESSERA_CHECK(num_epochs > 0, "build_bert_sample_mapping: num_epochs ", num_epochs);
  TESSERA_CHECK(max_seq_length > 1, "BERT samples need --seq-length of at least 5 ([CLS], two [SEP], two tokens); "
                "the target length would be ", max_seq_length);
  TESSERA_CHECK(short_seq_prob >= 0.0 && short_seq_prob <= 1.0, "--short-seq-prob ", short_seq_prob,
                " is not in [0, 1]");
  TESSERA_CHECK(seed > 0 && seed < INT32_MAX, "BERT datasets need --seed in [1, 2^31 - 2], got ", seed);
  TESSERA_CHECK(min_num_sent >= 1, "build_bert_sample_mapping: min_num_sent ", min_num_sent);
  TESSERA_CHECK(!docs.empty(), "build_bert_sample_mapping: no document boundaries");
  for (size_t d = 0; d + 1 < docs.size(); ++d)
    TESSERA_CHECK(docs[d] <= docs[d + 1], "build_bert_sample_mapping: document boundaries out of order at ", d);
  TESSERA_CHECK(docs.front() >= 0 && docs.back() <= static_cast<int64_t>(sizes.size()),
                "build_bert_sample_mapping: sentences [", docs.front(), ", ", docs.back(), ") outside the ",
                sizes.size(), " sentences");

  // A ratio, as helpers.cpp: C's round of 1 / probability.
  const int32_t short_seq_ratio = short_seq_prob > 0 ? static_cast<int32_t>(std::round(1.0 / short_seq_prob)) : 0;
  // One generator for the whole build: helpers.cpp counts and then fills with identically seeded
  // generators, which draws the same numbers as one pass.
  std::mt19937 rand32(static_cast<uint32_t>(seed));
  const auto target_sample_length = [&]() -> int32_t {
    if (short_seq_ratio == 0) return max_seq_length;
    const uint64_t r = rand32();
    if (r % static_cast<uint64_t>(short_seq_ratio) == 0)
      return static_cast<int32_t>(2 + r % static_cast<uint64_t>(max_seq_length - 1));
    return max_seq_length;
  };

  std::vector<int64_t> maps;
  uint64_t map_index = 0;
  for (int32_t epoch = 0; epoch < num_epochs; ++epoch) {
    if (map_index >= max_num_samples) break;
    const uint64_t at_epoch_start = map_index;
    for (size_t doc = 0; doc + 1 < docs.size(); ++doc) {
      const int64_t first = docs[doc];
      const int64_t last = docs[doc + 1];
      int64_t prev_start = first;
      int64_t remaining = last - first;
      bool long_sentence = false;
      if (remaining > 1) {
        for (int64_t s = first; s < last && !long_sentence; ++s) long_sentence = sizes[s] > kBertLongSentenceLength;
      }
      if (remaining < min_num_sent || long_sentence) continue;
      int32_t seq_len = 0;
      int32_t num_sent = 0;
      int32_t target = target_sample_length();
      for (int64_t s = first; s < last; ++s) {
        seq_len += sizes[s];
        ++num_sent;
        --remaining;
        if ((seq_len >= target && remaining > 1 && num_sent >= min_num_sent) || remaining == 0) {
          maps.insert(maps.end(), {prev_start, s + 1, static_cast<int64_t>(target)});
          ++map_index;
          prev_start = s + 1;
          target = target_sample_length();
          seq_len = 0;
          num_sent = 0;
        }
      }
    }
    if (map_index == at_epoch_start && epoch + 1 < num_epochs)
      throw Error(str_cat("BERT samples: no document of the split gives a sample (each needs at least ", min_num_sent,
                          " sentences", min_num_sent > 1 ? " (the binary head's two segments)" : "",
                          ", and none longer than ", kBertLongSentenceLength,
                          " tokens when it has several); was the dataset preprocessed with --split-sentences?"));
  }

  // helpers.cpp's Fisher-Yates with std::mt19937_64(seed + 1).
  std::mt19937_64 rand64(static_cast<uint64_t>(seed + 1));
  const int64_t n = static_cast<int64_t>(map_index);
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(rand64() % static_cast<uint64_t>(i + 1));
    for (int k = 0; k < 3; ++k) std::swap(maps[3 * i + k], maps[3 * j + k]);
  }
  return maps;
}

// ---- masking ----

MaskedLmPredictions create_masked_lm_predictions(std::span<const int32_t> tokens, int64_t target_seq_length,
                                                 double mask_prob, const MaskingVocabulary& vocab,
                                                 NumpyRandomState& rng) {
  static const NgramCdf ngram_cdf;
  // Whole words: a "##" piece joins the candidate before it; [CLS] and [SEP] are never candidates.
  std::vector<std::vector<int32_t>> candidates;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t t = tokens[i];
    if (t == vocab.cls || t == vocab.sep) continue;
    TESSERA_CHECK(t >= 0 && static_cast<size_t>(t) < vocab.continues_word.size(), "BERT masking: token id ", t,
                  " is outside the vocabulary of ", vocab.continues_word.size());
    if (vocab.continues_word[static_cast<size_t>(t)] && !candidates.empty()) {
      candidates.back().push_back(static_cast<int32_t>(i));
    } else {
      candidates.push_back({static_cast<int32_t>(i)});
    }
  }

  // A float, compared with counts as Python compares them.
  const double n_maskings =
      std::min(mask_prob * static_cast<double>(target_seq_length),
               static_cast<double>(std::max<int64_t>(1, python_round(static_cast<double>(tokens.size()) * mask_prob))));

  // candidate_ngrams[i] holds candidates[i:i+1], [i:i+2], [i:i+3] (shorter at the end); shuffling
  // the list of them is shuffling their start indices.
  std::vector<int64_t> order(candidates.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  rng.shuffle(std::span<int64_t>(order));

  MaskedLmPredictions out;
  out.tokens.assign(tokens.begin(), tokens.end());
  std::vector<std::pair<int32_t, int32_t>> masked;  // (position, original id)
  std::vector<bool> is_masked(tokens.size(), false);
  std::vector<int32_t> ngram;
  for (int64_t start : order) {
    if (static_cast<double>(masked.size()) >= n_maskings) break;
    int n = ngram_cdf.draw(rng);
    bool skip = false;
    while (true) {
      ngram.clear();
      const size_t stop = std::min(candidates.size(), static_cast<size_t>(start) + static_cast<size_t>(n));
      for (size_t c = static_cast<size_t>(start); c < stop; ++c)
        ngram.insert(ngram.end(), candidates[c].begin(), candidates[c].end());
      --n;
      if (n_maskings >= static_cast<double>(masked.size() + ngram.size())) break;
      if (n == 0) {
        skip = true;
        break;
      }
    }
    if (skip) continue;
    if (std::any_of(ngram.begin(), ngram.end(), [&](int32_t i) { return is_masked[static_cast<size_t>(i)]; })) continue;
    for (int32_t i : ngram) {
      is_masked[static_cast<size_t>(i)] = true;
      const std::optional<int32_t> replacement = token_mask(vocab, rng);
      out.tokens[static_cast<size_t>(i)] = replacement ? *replacement : tokens[static_cast<size_t>(i)];
      masked.emplace_back(i, tokens[static_cast<size_t>(i)]);
    }
  }
  // Megatron shuffles candidate_ngrams once more here for the permutation it does not do; the
  // state is discarded after the sample, so those draws change nothing.
  std::sort(masked.begin(), masked.end());
  for (const auto& [position, label] : masked) {
    out.positions.push_back(position);
    out.labels.push_back(label);
  }
  return out;
}

// ---- one sample ----

BertSample build_bert_sample(std::span<const std::vector<int32_t>> sentences, int64_t target_seq_length,
                             int64_t index, const BertSampleOptions& options, const MaskingVocabulary& vocab) {
  TESSERA_CHECK(index >= 0, "BERT sample: negative index ", index);
  NumpyRandomState rng(static_cast<uint32_t>((static_cast<uint64_t>(options.seed) + static_cast<uint64_t>(index)) %
                                             (uint64_t{1} << 32)));
  TESSERA_CHECK(target_seq_length <= options.seq_length, "BERT sample ", index, ": target length ",
                target_seq_length, " above --seq-length ", options.seq_length);

  // Segments A and B: the sentences before and from the pivot, swapped half the time.
  size_t pivot = sentences.size();
  bool is_random = false;
  if (options.binary_head) {
    TESSERA_CHECK(sentences.size() > 1, "BERT sample ", index,
                  ": the binary head needs at least two sentences, the mapping row has ", sentences.size());
    pivot = 1;
    if (sentences.size() >= 3) pivot = static_cast<size_t>(rng.randint(1, static_cast<int64_t>(sentences.size())));
    is_random = rng.random_sample() < 0.5;
  }
  Segment a, b;
  for (size_t s = 0; s < sentences.size(); ++s) {
    std::vector<int32_t>& into = s < pivot ? a.tokens : b.tokens;
    into.insert(into.end(), sentences[s].begin(), sentences[s].end());
  }
  if (is_random) std::swap(a, b);
  a.end = a.tokens.size();
  b.end = b.tokens.size();

  // Truncation: a token off the longer segment (B on a tie), from the front or the back.
  bool truncated = false;
  while (static_cast<int64_t>(a.size() + b.size()) > target_seq_length) {
    Segment& s = a.size() > b.size() ? a : b;
    if (rng.random_sample() < 0.5) {
      ++s.begin;
    } else {
      --s.end;
    }
    truncated = true;
  }

  std::vector<int32_t> tokens;
  std::vector<int32_t> types;
  tokens.push_back(vocab.cls);
  tokens.insert(tokens.end(), a.tokens.begin() + static_cast<std::ptrdiff_t>(a.begin),
                a.tokens.begin() + static_cast<std::ptrdiff_t>(a.end));
  tokens.push_back(vocab.sep);
  types.assign(tokens.size(), 0);
  if (b.size() > 0) {
    tokens.insert(tokens.end(), b.tokens.begin() + static_cast<std::ptrdiff_t>(b.begin),
                  b.tokens.begin() + static_cast<std::ptrdiff_t>(b.end));
    tokens.push_back(vocab.sep);
    types.resize(tokens.size(), 1);
  }

  MaskedLmPredictions masked = create_masked_lm_predictions(tokens, target_seq_length, options.mask_prob, vocab, rng);

  const size_t length = static_cast<size_t>(options.seq_length);
  TESSERA_CHECK(masked.tokens.size() <= length, "BERT sample ", index, ": ", masked.tokens.size(),
                " tokens do not fit --seq-length ", options.seq_length);
  BertSample sample;
  sample.tokens = std::move(masked.tokens);
  const size_t used = sample.tokens.size();
  sample.tokens.resize(length, vocab.pad);
  sample.types = std::move(types);
  sample.types.resize(length, vocab.pad);
  sample.padding_mask.assign(used, 1);
  sample.padding_mask.resize(length, vocab.pad);
  sample.labels.assign(length, -1);
  sample.loss_mask.assign(length, 0.0f);
  for (size_t k = 0; k < masked.positions.size(); ++k) {
    sample.labels[static_cast<size_t>(masked.positions[k])] = masked.labels[k];
    sample.loss_mask[static_cast<size_t>(masked.positions[k])] = 1.0f;
  }
  sample.is_random = is_random ? 1 : 0;
  sample.truncated = truncated;
  return sample;
}

// ---- BertDataset ----

BertDataset::BertDataset(std::shared_ptr<const IndexedDataset> dataset, Split split, DocumentRange documents,
                         std::optional<int64_t> num_samples, const BertDatasetConfig& config,
                         std::shared_ptr<const MaskingVocabulary> vocab)
    : dataset_(std::move(dataset)),
      split_(split),
      documents_(documents),
      num_samples_(num_samples),
      config_(config),
      vocab_(std::move(vocab)) {
  const std::string& prefix = dataset_->prefix();
  TESSERA_CHECK(vocab_ != nullptr && !vocab_->ids.empty(), prefix, ": BERT samples need a masking vocabulary");
  TESSERA_CHECK(config_.seq_length >= 5 && config_.seq_length - 3 <= INT32_MAX,
                "BERT samples need --seq-length of at least 5, got ", config_.seq_length);
  TESSERA_CHECK(config_.mask_prob > 0.0 && config_.mask_prob < 1.0, "--mask-prob ", config_.mask_prob,
                " is not in (0, 1)");
  TESSERA_CHECK(config_.short_seq_prob >= 0.0 && config_.short_seq_prob <= 1.0, "--short-seq-prob ",
                config_.short_seq_prob, " is not in [0, 1]");
  TESSERA_CHECK(config_.seed >= 1 && config_.seed < INT32_MAX, "BERT datasets need --seed in [1, 2^31 - 2], got ",
                config_.seed);
  TESSERA_CHECK(!num_samples_ || *num_samples_ >= 0, prefix, ": negative number of samples ", *num_samples_);
  TESSERA_CHECK(documents_.first >= 0 && documents_.first <= documents_.second &&
                    documents_.second <= dataset_->num_documents(),
                prefix, ": documents [", documents_.first, ", ", documents_.second, ") out of range of its ",
                dataset_->num_documents(), " documents");
  if (documents_.first == documents_.second)
    throw Error(str_cat(prefix, ": the ", split_name(split_), " split",
                        config_.split.empty() ? std::string() : str_cat(" (--split '", config_.split, "')"),
                        " has no documents; the dataset has ", dataset_->num_documents(),
                        small_corpus_hint(config_.split)));
  TESSERA_CHECK(static_cast<uint64_t>(dataset_->num_sequences()) <= std::numeric_limits<uint32_t>::max(), prefix,
                ": more than 2^32 sentences are not supported");

  // Megatron's unique description (key config attributes) plus the dataset's size, so that a
  // regenerated dataset under the same prefix misses the old cache.
  nlohmann::ordered_json d;
  d["class"] = kClassName;
  d["dataset_path"] = prefix;
  d["num_samples"] = num_samples_ ? nlohmann::ordered_json(*num_samples_) : nlohmann::ordered_json(nullptr);
  d["index_split"] = split_name(split_);
  d["random_seed"] = config_.seed;
  d["sequence_length"] = config_.seq_length;
  // Empty with --train-data-path and the like: null, as Megatron's split None.
  d["split"] = config_.split.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(config_.split);
  d["masking_probability"] = config_.mask_prob;
  d["short_sequence_probability"] = config_.short_seq_prob;
  d["masking_max_ngram"] = kMaxNgram;
  d["masking_do_full_word"] = true;
  d["masking_do_permutation"] = false;
  d["masking_use_longer_ngrams"] = false;
  d["masking_use_geometric_distribution"] = false;
  d["classification_head"] = config_.binary_head;
  d["documents"] = {documents_.first, documents_.second};
  d["dataset_sequences"] = dataset_->num_sequences();
  d["dataset_documents"] = dataset_->num_documents();
  d["dataset_tokens"] = dataset_->num_tokens();
  d["dataset_dtype"] = dtype_name(dataset_->dtype());
  description_ = d.dump(4);

  if (!config_.use_cache) {
    build_mapping();
    cache_status_ = "built (caching disabled)";
    return;
  }
  const std::string dir = config_.cache_dir.empty()
                              ? (fs::path(prefix) / "cache" / str_cat(kClassName, "_indices")).string()
                              : config_.cache_dir;
  cache_prefix_ = (fs::path(dir) / str_cat(fnv1a_hex(description_), "-", kClassName, "-")).string();
  const std::string why = load_cached();
  if (why.empty()) {
    cache_status_ = str_cat("loaded from cache ", cache_prefix_, "*");
    return;
  }
  build_mapping();
  try {
    fs::create_directories(dir);
    // The description goes last: its presence marks a complete set.
    sample_index_.save(cache_prefix_ + "sample_index.npy");
    write_file_atomically(cache_prefix_ + "description.txt", description_);
    cache_status_ = str_cat("built (", why, ") and cached at ", cache_prefix_, "*");
  } catch (const std::exception& e) {
    cache_status_ = str_cat("built (", why, "); not cached: ", e.what());
  }
}

void BertDataset::build_mapping() {
  std::vector<int64_t> boundaries;
  for (int64_t d = documents_.first; d <= documents_.second; ++d) boundaries.push_back(dataset_->document_index(d));
  const std::vector<int32_t> sizes = dataset_->sequence_lengths();
  // _build_sample_index: int32 max - 1 epochs for a sample count, else one epoch.
  const int32_t num_epochs = num_samples_ ? static_cast<int32_t>(INT32_MAX - 1) : 1;
  const uint64_t max_num_samples =
      num_samples_ ? static_cast<uint64_t>(*num_samples_) : std::numeric_limits<uint64_t>::max();
  const int32_t max_seq_length = static_cast<int32_t>(config_.seq_length - 3);  // [CLS] and two [SEP]
  std::vector<int64_t> rows =
      build_bert_sample_mapping(boundaries, sizes, num_epochs, max_num_samples, max_seq_length, config_.short_seq_prob,
                                static_cast<int32_t>(config_.seed), config_.binary_head ? 2 : 1);
  const int64_t n = static_cast<int64_t>(rows.size() / 3);
  sample_index_ = NpyArray::from_vector(std::vector<uint32_t>(rows.begin(), rows.end()), {n, 3});
}

std::string BertDataset::load_cached() {
  const std::string desc_path = cache_prefix_ + "description.txt";
  for (const char* name : {"description.txt", "sample_index.npy"}) {
    if (!fs::exists(cache_prefix_ + name)) return "no cache";
  }
  try {
    if (read_text_file(desc_path) != description_) return str_cat("cache description differs: ", desc_path);
    sample_index_ = NpyArray::load(cache_prefix_ + "sample_index.npy");
    validate_mapping();
  } catch (const Error& e) {
    sample_index_ = NpyArray();
    return str_cat("cache invalid: ", e.what());
  }
  return "";
}

// A loaded mapping must be what this dataset's build could produce in shape and range, so that a
// damaged cache cannot make get() read outside the split.
void BertDataset::validate_mapping() const {
  const std::string where = cache_prefix_ + "sample_index.npy: ";
  const auto& shape = sample_index_.shape();
  TESSERA_CHECK(sample_index_.type() == NpyArray::Type::kUInt32 && shape.size() == 2 && shape[1] == 3, where,
                "expected uint32 [n, 3]");
  const int64_t rows = shape[0];
  TESSERA_CHECK(!num_samples_ || rows >= *num_samples_, where, rows, " samples, fewer than the ", *num_samples_,
                " asked for");
  const int64_t first = dataset_->document_index(documents_.first);
  const int64_t last = dataset_->document_index(documents_.second);
  const int64_t min_sentences = config_.binary_head ? 2 : 1;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t begin = sample_index_[3 * r], end = sample_index_[3 * r + 1], target = sample_index_[3 * r + 2];
    TESSERA_CHECK(begin >= first && end <= last && end - begin >= min_sentences, where, "row ", r, " has sentences [",
                  begin, ", ", end, "), outside the split's [", first, ", ", last, ") or fewer than ", min_sentences);
    TESSERA_CHECK(target >= 2 && target <= config_.seq_length - 3, where, "row ", r, " has target length ", target);
  }
}

BertSample BertDataset::get(int64_t index) const {
  TESSERA_CHECK(index >= 0 && index < size(), dataset_->prefix(), " (", split_name(split_), "): sample ", index,
                " out of range [0, ", size(), ")");
  const int64_t begin = sample_index_[3 * index], end = sample_index_[3 * index + 1];
  std::vector<std::vector<int32_t>> sentences;
  sentences.reserve(static_cast<size_t>(end - begin));
  for (int64_t s = begin; s < end; ++s) {
    sentences.push_back(dataset_->get(s));
    check_token_ids(sentences.back(), static_cast<int64_t>(vocab_->continues_word.size()), dataset_->prefix());
  }
  const BertSampleOptions options{config_.seq_length, config_.seed, config_.mask_prob, config_.binary_head};
  return build_bert_sample(sentences, sample_index_[3 * index + 2], index, options, *vocab_);
}

// ---- blends ----

BlendedMaskedLmDataset::BlendedMaskedLmDataset(std::vector<std::shared_ptr<const MaskedLmDataset>> datasets,
                                               std::span<const double> weights, int64_t size)
    : datasets_(std::move(datasets)), weights_(normalize_weights(weights)), size_(size) {
  TESSERA_CHECK(!datasets_.empty() && datasets_.size() == weights.size(), "blended BERT dataset: ", datasets_.size(),
                " datasets for ", weights.size(), " weights");
  TESSERA_CHECK(size_ >= 0, "blended BERT dataset: negative size ", size_);
  for (const auto& d : datasets_) {
    TESSERA_CHECK(d != nullptr && d->seq_length() == datasets_.front()->seq_length(),
                  "blended BERT dataset: datasets must exist and share a sequence length");
  }
  indices_ = build_blending_indices(weights_, size_);
}

BertSample BlendedMaskedLmDataset::get(int64_t index) const {
  TESSERA_CHECK(index >= 0 && index < size_, "blended BERT dataset: sample ", index, " out of range [0, ", size_, ")");
  const auto& dataset = datasets_[static_cast<size_t>(indices_.dataset_index[index])];
  const int64_t sample = indices_.dataset_sample_index[index];
  TESSERA_CHECK(sample < dataset->size(), "blended BERT dataset: sample ", index, " needs sample ", sample,
                " of dataset ", indices_.dataset_index[index], ", which has only ", dataset->size(),
                " (raise --mid-level-dataset-surplus)");
  return dataset->get(sample);
}

std::array<std::shared_ptr<const MaskedLmDataset>, 3> build_bert_datasets(
    const BertDataConfig& config, const std::array<int64_t, 3>& sizes, std::shared_ptr<const MaskingVocabulary> vocab) {
  const auto per_split = parse_split_data_paths(config.split_data_path);
  const bool use_per_split = std::any_of(per_split.begin(), per_split.end(), [](const auto& b) { return b.has_value(); });
  BertDatasetConfig bert;
  bert.seq_length = config.seq_length;
  bert.seed = config.seed;
  bert.mask_prob = config.mask_prob;
  bert.short_seq_prob = config.short_seq_prob;
  bert.binary_head = config.binary_head;
  bert.split = use_per_split ? std::string() : config.split;
  bert.cache_dir = config.cache_path;

  // _build_megatron_dataset_splits with MaskedWordPieceDataset.numel_low_level_dataset: documents.
  const auto build_splits = [&](const std::string& prefix, const SplitMatrix& matrix,
                                const std::array<std::optional<int64_t>, 3>& counts) {
    auto indexed = std::make_shared<const IndexedDataset>(prefix);
    const auto ranges = split_document_ranges(matrix, indexed->num_documents());
    std::array<std::shared_ptr<const MaskedLmDataset>, 3> out;
    for (int i = 0; i < 3; ++i) {
      if (!matrix[i]) continue;
      const bool optional = counts[i] == 0 || (i == static_cast<int>(Split::kTest) && config.test_split_optional);
      if (ranges[i]->first == ranges[i]->second && optional) continue;
      out[i] = std::make_shared<const BertDataset>(indexed, static_cast<Split>(i), *ranges[i], counts[i], bert, vocab);
    }
    return out;
  };

  if (use_per_split)
    return assemble_per_split<MaskedLmDataset, BlendedMaskedLmDataset>(per_split, sizes,
                                                                       config.mid_level_dataset_surplus, build_splits);
  const DataBlend blend = parse_data_path(config.data_path);
  const SplitMatrix matrix = split_matrix(parse_split(config.split));
  return assemble_splits<MaskedLmDataset, BlendedMaskedLmDataset>(
      blend, matrix, sizes, config.mid_level_dataset_surplus, config.test_split_optional, config.split, build_splits);
}

}  // namespace tessera::data
