#include "data/gpt_dataset.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "data/python_round.h"

namespace tessera::data {

namespace {

namespace fs = std::filesystem;

std::string trim(std::string_view s) {
  const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return std::string(s);
}

}  // namespace

std::string fnv1a_hex(const std::string& s) {
  uint64_t h = 14695981039346656037ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

void write_file_atomically(const std::string& path, const std::string& bytes) {
  const std::string tmp = str_cat(path, ".tmp.", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(str_cat(tmp, ": cannot create: ", std::strerror(errno)));
  const char* p = bytes.data();
  size_t n = bytes.size();
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      std::string err = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Error(str_cat(tmp, ": write failed: ", err));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  ::fsync(fd);
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string err = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw Error(str_cat(path, ": cannot rename ", tmp, " into place: ", err));
  }
}

std::string read_text_file(const std::string& path) {
  MappedFile f(path);
  return std::string(f.data() == nullptr ? "" : f.data(), f.size());
}

namespace {

// ---- .npy ----

const char* npy_descr(NpyArray::Type t) {
  switch (t) {
    case NpyArray::Type::kInt16: return "<i2";
    case NpyArray::Type::kInt32: return "<i4";
    case NpyArray::Type::kUInt32: return "<u4";
    case NpyArray::Type::kInt64: return "<i8";
  }
  return "";
}

size_t npy_itemsize(NpyArray::Type t) {
  switch (t) {
    case NpyArray::Type::kInt16: return 2;
    case NpyArray::Type::kInt32:
    case NpyArray::Type::kUInt32: return 4;
    case NpyArray::Type::kInt64: return 8;
  }
  return 0;
}

// numpy.lib.format's header for format 1.0: the dict's repr, padded with spaces and a newline so
// that the data starts at a multiple of 64 bytes.
std::string npy_header(NpyArray::Type type, const std::vector<int64_t>& shape) {
  std::string shape_repr = "(";
  for (size_t i = 0; i < shape.size(); ++i) shape_repr += str_cat(i ? ", " : "", shape[i]);
  if (shape.size() == 1) shape_repr += ",";
  shape_repr += ")";
  std::string dict = str_cat("{'descr': '", npy_descr(type), "', 'fortran_order': False, 'shape': ", shape_repr, ", }");
  const size_t preamble = 8 + 2;  // magic + version, header length
  const size_t padding = 64 - ((preamble + dict.size() + 1) % 64);
  dict += std::string(padding, ' ') + "\n";
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict;
}

}  // namespace

const char* split_name(Split split) {
  switch (split) {
    case Split::kTrain: return "train";
    case Split::kValid: return "valid";
    case Split::kTest: return "test";
  }
  return "?";
}

// ---- --split ----

std::array<double, 3> parse_split(std::string_view split) {
  const auto bad = [&](const std::string& why) {
    return Error(str_cat("--split '", split, "': ", why,
                         " (expected up to three non-negative weights for train, valid and test, e.g. 949,50,1)"));
  };
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t i = 0; i <= split.size(); ++i) {
    if (i == split.size() || split[i] == ',' || split[i] == '/') {
      parts.push_back(trim(split.substr(start, i - start)));
      start = i + 1;
    }
  }
  if (parts.size() == 1 && parts[0].empty()) throw bad("empty");
  if (parts.size() > 3) throw bad(str_cat(parts.size(), " weights"));
  std::array<double, 3> w{0.0, 0.0, 0.0};
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    // Digits with at most one '.', as Megatron's [.0-9]+ pattern reads a number.
    const bool numeric = !p.empty() && std::count(p.begin(), p.end(), '.') <= 1 &&
                         std::any_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
                         std::all_of(p.begin(), p.end(), [](char c) { return c == '.' || (c >= '0' && c <= '9'); });
    if (!numeric) throw bad(str_cat("'", p, "' is not a non-negative number"));
    auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), w[i]);
    if (ec != std::errc() || end != p.data() + p.size() || !std::isfinite(w[i]))
      throw bad(str_cat("'", p, "' is not a finite number"));
  }
  if (numpy_sum(w) <= 0.0) throw bad("the weights sum to zero");
  std::vector<double> n = normalize_weights(w);
  return {n[0], n[1], n[2]};
}

SplitMatrix split_matrix(const std::array<double, 3>& weights) {
  std::array<double, 4> expansion{0.0, 0.0, 0.0, 0.0};
  for (int i = 0; i < 3; ++i) expansion[i + 1] = expansion[i] + weights[i];
  SplitMatrix m;
  for (int i = 0; i < 3; ++i) {
    if (expansion[i + 1] > expansion[i]) m[i] = std::pair{expansion[i], expansion[i + 1]};
  }
  return m;
}

std::array<std::optional<DocumentRange>, 3> split_document_ranges(const SplitMatrix& matrix, int64_t num_documents) {
  std::array<std::optional<DocumentRange>, 3> ranges;
  const double n = static_cast<double>(num_documents);
  for (int i = 0; i < 3; ++i) {
    if (matrix[i]) ranges[i] = DocumentRange{python_round(matrix[i]->first * n), python_round(matrix[i]->second * n)};
  }
  return ranges;
}

double numpy_sum(std::span<const double> x) {
  // NumPy's pairwise_sum: a plain loop below 8 elements, 8 accumulators up to 128, halves above.
  const size_t n = x.size();
  if (n < 8) {
    double res = 0.0;
    for (double v : x) res += v;
    return res;
  }
  if (n <= 128) {
    double r[8];
    for (int j = 0; j < 8; ++j) r[j] = x[j];
    size_t i = 8;
    for (; i + 8 <= n; i += 8) {
      for (int j = 0; j < 8; ++j) r[j] += x[i + j];
    }
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += x[i];
    return res;
  }
  size_t half = n / 2;
  half -= half % 8;
  return numpy_sum(x.subspan(0, half)) + numpy_sum(x.subspan(half));
}

std::vector<double> normalize_weights(std::span<const double> weights) {
  const double sum = numpy_sum(weights);
  std::vector<double> out(weights.size());
  for (size_t i = 0; i < weights.size(); ++i) out[i] = weights[i] / sum;
  return out;
}

// ---- NpyArray ----

template <typename T>
NpyArray NpyArray::from_vector(std::vector<T> values, std::vector<int64_t> shape) {
  NpyArray a;
  if constexpr (std::is_same_v<T, int16_t>) a.type_ = Type::kInt16;
  else if constexpr (std::is_same_v<T, int32_t>) a.type_ = Type::kInt32;
  else if constexpr (std::is_same_v<T, uint32_t>) a.type_ = Type::kUInt32;
  else a.type_ = Type::kInt64;
  static_assert(std::is_same_v<T, int16_t> || std::is_same_v<T, int32_t> || std::is_same_v<T, uint32_t> ||
                std::is_same_v<T, int64_t>);
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  TESSERA_CHECK(count == static_cast<int64_t>(values.size()), "NpyArray: shape does not match ", values.size(),
                " values");
  auto owner = std::make_shared<std::vector<T>>(std::move(values));
  a.data_ = owner->data();
  a.owner_ = owner;
  a.shape_ = std::move(shape);
  a.size_ = count;
  return a;
}

template NpyArray NpyArray::from_vector(std::vector<int16_t>, std::vector<int64_t>);
template NpyArray NpyArray::from_vector(std::vector<int32_t>, std::vector<int64_t>);
template NpyArray NpyArray::from_vector(std::vector<uint32_t>, std::vector<int64_t>);
template NpyArray NpyArray::from_vector(std::vector<int64_t>, std::vector<int64_t>);

void NpyArray::save(const std::string& path) const {
  std::string bytes = npy_header(type_, shape_);
  const size_t header = bytes.size();
  const size_t n = static_cast<size_t>(size_) * npy_itemsize(type_);
  bytes.resize(header + n);
  if (n > 0) std::memcpy(bytes.data() + header, data_, n);
  write_file_atomically(path, bytes);
}

NpyArray NpyArray::load(const std::string& path) {
  auto file = std::make_shared<MappedFile>(path);
  const char* p = file->data();
  const uint64_t size = file->size();
  const auto bad = [&](const std::string& why) { return Error(str_cat(path, ": not a usable .npy index: ", why)); };
  if (size < 10 || std::memcmp(p, "\x93NUMPY", 6) != 0) throw bad("bad magic");
  if (p[6] != 1 || p[7] != 0) throw bad("not format version 1.0");
  const uint64_t header_len = static_cast<uint8_t>(p[8]) | (static_cast<uint64_t>(static_cast<uint8_t>(p[9])) << 8);
  if (10 + header_len > size) throw bad("truncated header");
  const std::string header(p + 10, header_len);

  NpyArray a;
  bool typed = false;
  for (Type t : {Type::kInt16, Type::kInt32, Type::kUInt32, Type::kInt64}) {
    if (header.find(str_cat("'descr': '", npy_descr(t), "'")) != std::string::npos) {
      a.type_ = t;
      typed = true;
    }
  }
  if (!typed) throw bad("dtype is not one of int16, int32, uint32, int64 (little-endian)");
  if (header.find("'fortran_order': False") == std::string::npos) throw bad("not C order");
  const size_t s = header.find("'shape': (");
  if (s == std::string::npos) throw bad("no shape");
  const size_t e = header.find(')', s);
  if (e == std::string::npos) throw bad("bad shape");
  std::string dims = header.substr(s + 10, e - s - 10);
  int64_t count = 1;
  for (size_t pos = 0; pos < dims.size();) {
    size_t comma = dims.find(',', pos);
    std::string d = trim(dims.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    if (!d.empty()) {
      int64_t v = 0;
      auto [end, ec] = std::from_chars(d.data(), d.data() + d.size(), v);
      if (ec != std::errc() || end != d.data() + d.size() || v < 0) throw bad(str_cat("bad shape '", dims, "'"));
      a.shape_.push_back(v);
      count *= v;
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  const uint64_t offset = 10 + header_len;
  if (offset % 8 != 0) throw bad("data not aligned");
  if (size - offset != static_cast<uint64_t>(count) * npy_itemsize(a.type_))
    throw bad(str_cat(size - offset, " data bytes for ", count, " elements of ", npy_descr(a.type_)));
  a.size_ = count;
  a.data_ = p + offset;
  a.owner_ = file;
  return a;
}

// ---- the algorithm ----

int64_t gpt_num_epochs(int64_t tokens_per_epoch, std::optional<int64_t> num_samples, int64_t seq_length) {
  if (!num_samples) return 1;
  TESSERA_CHECK(tokens_per_epoch > 0, "an epoch of 0 tokens cannot provide samples");
  const int64_t requested = *num_samples * seq_length + 1;  // + the extra label token
  // ceil(requested / tokens_per_epoch), at least 1: the loop of _get_num_epochs.
  return std::max<int64_t>(1, (requested + tokens_per_epoch - 1) / tokens_per_epoch);
}

EpochPlan gpt_epoch_plan(int64_t tokens_per_epoch, std::optional<int64_t> num_samples, int64_t seq_length) {
  EpochPlan plan;
  plan.num_epochs = gpt_num_epochs(tokens_per_epoch, num_samples, seq_length);
  if (plan.num_epochs == 1) return plan;
  plan.num_samples_sans_final_epoch = ((plan.num_epochs - 1) * tokens_per_epoch - 1) / seq_length;
  const int64_t from_final_epoch = *num_samples - plan.num_samples_sans_final_epoch;
  const int64_t per_epoch = (tokens_per_epoch - 1) / seq_length;
  TESSERA_CHECK(from_final_epoch >= 0 && from_final_epoch <= per_epoch + 1, "epoch arithmetic broke: ",
                from_final_epoch, " samples from the final epoch of ", per_epoch);
  // Megatron's threshold: int(0.80 * num_samples_per_epoch), truncated.
  plan.separate_final_epoch = from_final_epoch < static_cast<int64_t>(0.80 * static_cast<double>(per_epoch));
  return plan;
}

std::vector<int32_t> build_document_index(std::span<const int32_t> documents, int64_t num_epochs,
                                          NumpyRandomState& rng, bool separate_final_epoch) {
  if (!separate_final_epoch || num_epochs == 1) {
    std::vector<int32_t> index;
    index.reserve(documents.size() * static_cast<size_t>(num_epochs));
    for (int64_t e = 0; e < num_epochs; ++e) index.insert(index.end(), documents.begin(), documents.end());
    rng.shuffle(std::span<int32_t>(index));
    return index;
  }
  std::vector<int32_t> first = build_document_index(documents, num_epochs - 1, rng, false);
  std::vector<int32_t> last = build_document_index(documents, 1, rng, false);
  first.insert(first.end(), last.begin(), last.end());
  return first;
}

std::vector<int64_t> build_sample_index(std::span<const int32_t> sizes, std::span<const int32_t> document_index,
                                        int64_t seq_length, int64_t num_epochs, int64_t tokens_per_epoch) {
  TESSERA_CHECK(seq_length > 1, "--seq-length must be above 1, got ", seq_length);
  TESSERA_CHECK(tokens_per_epoch > 1, "an epoch of ", tokens_per_epoch, " tokens cannot provide samples");
  const int64_t num_samples = (num_epochs * tokens_per_epoch - 1) / seq_length;
  std::vector<int64_t> index(2 * static_cast<size_t>(num_samples + 1));
  const int64_t last_position = static_cast<int64_t>(document_index.size()) - 1;
  int64_t position = 0;  // into document_index
  int64_t offset = 0;    // token offset in that document
  index[0] = 0;
  index[1] = 0;
  for (int64_t s = 1; s <= num_samples; ++s) {
    int64_t remaining = seq_length + 1;
    while (remaining != 0) {
      const int64_t doc_length = sizes[document_index[position]] - offset;
      remaining -= doc_length;
      if (remaining <= 0) {
        // The sample ends inside this document; its last token starts the next sample.
        offset += remaining + doc_length - 1;
        remaining = 0;
      } else if (position == last_position) {
        // Out of documents (only possible for the last sample).
        offset = sizes[document_index[position]] - 1;
        break;
      } else {
        ++position;
        offset = 0;
      }
    }
    index[2 * s] = position;
    index[2 * s + 1] = offset;
  }
  return index;
}

std::vector<int64_t> build_shuffle_index(int64_t num_samples, int64_t total_size, NumpyRandomState& rng) {
  std::vector<int64_t> index(static_cast<size_t>(total_size));
  for (int64_t i = 0; i < total_size; ++i) index[i] = i;
  rng.shuffle(std::span<int64_t>(index.data(), static_cast<size_t>(num_samples)));
  if (num_samples < total_size)
    rng.shuffle(std::span<int64_t>(index.data() + num_samples, static_cast<size_t>(total_size - num_samples)));
  return index;
}

// ---- GptDataset ----

GptDataset::GptDataset(std::shared_ptr<const IndexedDataset> dataset, Split split, DocumentRange documents,
                       std::optional<int64_t> num_samples, const GptDatasetConfig& config)
    : dataset_(std::move(dataset)), split_(split), documents_(documents), num_samples_(num_samples), config_(config) {
  const std::string& prefix = dataset_->prefix();
  TESSERA_CHECK(config_.seq_length > 1, "--seq-length must be above 1, got ", config_.seq_length);
  TESSERA_CHECK(!num_samples_ || *num_samples_ >= 0, prefix, ": negative number of samples ", *num_samples_);
  TESSERA_CHECK(documents_.first >= 0 && documents_.first <= documents_.second &&
                    documents_.second <= dataset_->num_sequences(),
                prefix, ": documents [", documents_.first, ", ", documents_.second, ") out of range of its ",
                dataset_->num_sequences(), " sequences");
  TESSERA_CHECK(documents_.second <= INT32_MAX, prefix, ": more than 2^31 documents are not supported");
  if (documents_.first == documents_.second)
    throw Error(str_cat(prefix, ": the ", split_name(split_), " split",
                        config_.split.empty() ? std::string() : str_cat(" (--split '", config_.split, "')"),
                        " has no documents; the dataset has ", dataset_->num_sequences(),
                        small_corpus_hint(config_.split)));
  for (int64_t d = documents_.first; d < documents_.second; ++d) tokens_per_epoch_ += dataset_->sequence_length(d);
  if (tokens_per_epoch_ <= 1)
    throw Error(str_cat(prefix, ": the ", split_name(split_), " split's ", documents_.second - documents_.first,
                        " documents hold ", tokens_per_epoch_, " tokens, too few for any sample",
                        small_corpus_hint(config_.split)));
  plan_ = gpt_epoch_plan(tokens_per_epoch_, num_samples_, config_.seq_length);

  // The description keys the cache, as Megatron's unique_description does. It also records the
  // dataset's size so that a regenerated dataset under the same prefix misses the old cache.
  nlohmann::ordered_json d;
  d["class"] = "GPTDataset";
  d["dataset_path"] = prefix;
  d["num_samples"] = num_samples_ ? nlohmann::ordered_json(*num_samples_) : nlohmann::ordered_json(nullptr);
  d["index_split"] = split_name(split_);
  d["random_seed"] = config_.seed;
  d["sequence_length"] = config_.seq_length;
  // Empty with --train-data-path and the like: null, as Megatron's split None.
  d["split"] = config_.split.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(config_.split);
  d["documents"] = {documents_.first, documents_.second};
  d["add_extra_token_to_sequence"] = true;
  d["dataset_sequences"] = dataset_->num_sequences();
  d["dataset_tokens"] = dataset_->num_tokens();
  d["dataset_dtype"] = dtype_name(dataset_->dtype());
  description_ = d.dump(4);

  if (!config_.use_cache) {
    build_indices();
    cache_status_ = "built (caching disabled)";
    return;
  }
  const std::string dir =
      config_.cache_dir.empty() ? (fs::path(prefix) / "cache" / "GPTDataset_indices").string() : config_.cache_dir;
  cache_prefix_ = (fs::path(dir) / str_cat(fnv1a_hex(description_), "-GPTDataset-", split_name(split_), "-")).string();
  std::string why = load_cached();
  if (why.empty()) {
    cache_status_ = str_cat("loaded from cache ", cache_prefix_, "*");
    return;
  }
  build_indices();
  try {
    fs::create_directories(dir);
    write_cache();
    cache_status_ = str_cat("built (", why, ") and cached at ", cache_prefix_, "*");
  } catch (const std::exception& e) {
    cache_status_ = str_cat("built (", why, "); not cached: ", e.what());
  }
}

void GptDataset::build_indices() {
  NumpyRandomState rng(config_.seed);
  std::vector<int32_t> documents;
  for (int64_t d = documents_.first; d < documents_.second; ++d) documents.push_back(static_cast<int32_t>(d));
  std::vector<int32_t> doc_index = build_document_index(documents, plan_.num_epochs, rng, plan_.separate_final_epoch);

  const std::vector<int32_t> sizes = dataset_->sequence_lengths();
  std::vector<int64_t> samples =
      build_sample_index(sizes, doc_index, config_.seq_length, plan_.num_epochs, tokens_per_epoch_);
  const int64_t rows = static_cast<int64_t>(samples.size() / 2);

  // Megatron's dtypes: int32 sample index unless positions or lengths outgrow it...
  const int64_t max_size = sizes.empty() ? 0 : *std::max_element(sizes.begin(), sizes.end());
  if (std::max<int64_t>(static_cast<int64_t>(doc_index.size()), max_size) <= INT32_MAX) {
    sample_index_ = NpyArray::from_vector(std::vector<int32_t>(samples.begin(), samples.end()), {rows, 2});
  } else {
    sample_index_ = NpyArray::from_vector(std::move(samples), {rows, 2});
  }
  // ...and a uint32 shuffle index unless the sample count nears 2^32.
  const int64_t total = rows - 1;
  std::vector<int64_t> shuffle =
      build_shuffle_index(plan_.separate_final_epoch ? plan_.num_samples_sans_final_epoch : total, total, rng);
  if (total >= static_cast<int64_t>(std::numeric_limits<uint32_t>::max()) - 1) {
    shuffle_index_ = NpyArray::from_vector(std::move(shuffle), {total});
  } else {
    shuffle_index_ = NpyArray::from_vector(std::vector<uint32_t>(shuffle.begin(), shuffle.end()), {total});
  }
  const int64_t doc_count = static_cast<int64_t>(doc_index.size());
  document_index_ = NpyArray::from_vector(std::move(doc_index), {doc_count});
}

void GptDataset::write_cache() {
  // The description goes last: its presence marks a complete set.
  document_index_.save(cache_prefix_ + "document_index.npy");
  sample_index_.save(cache_prefix_ + "sample_index.npy");
  shuffle_index_.save(cache_prefix_ + "shuffle_index.npy");
  write_file_atomically(cache_prefix_ + "description.txt", description_);
}

std::string GptDataset::load_cached() {
  const std::string desc_path = cache_prefix_ + "description.txt";
  for (const char* name : {"description.txt", "document_index.npy", "sample_index.npy", "shuffle_index.npy"}) {
    if (!fs::exists(cache_prefix_ + name)) return "no cache";
  }
  try {
    if (read_text_file(desc_path) != description_) return str_cat("cache description differs: ", desc_path);
    document_index_ = NpyArray::load(cache_prefix_ + "document_index.npy");
    sample_index_ = NpyArray::load(cache_prefix_ + "sample_index.npy");
    shuffle_index_ = NpyArray::load(cache_prefix_ + "shuffle_index.npy");
    validate_indices();
  } catch (const Error& e) {
    document_index_ = NpyArray();
    sample_index_ = NpyArray();
    shuffle_index_ = NpyArray();
    return str_cat("cache invalid: ", e.what());
  }
  return "";
}

// Checks loaded indices against what this dataset's build would produce in shape and range, so
// a stale or damaged cache cannot make get() read outside the data.
void GptDataset::validate_indices() const {
  const std::string where = cache_prefix_;
  const int64_t docs = documents_.second - documents_.first;
  const int64_t rows = (plan_.num_epochs * tokens_per_epoch_ - 1) / config_.seq_length + 1;

  TESSERA_CHECK(document_index_.type() == NpyArray::Type::kInt32 &&
                    document_index_.shape() == std::vector<int64_t>{plan_.num_epochs * docs},
                where, "document_index.npy: expected int32 [", plan_.num_epochs * docs, "]");
  for (int64_t i = 0; i < document_index_.size(); ++i) {
    const int64_t d = document_index_[i];
    TESSERA_CHECK(d >= documents_.first && d < documents_.second, where, "document_index.npy: entry ", i,
                  " is document ", d, ", outside the split");
  }

  TESSERA_CHECK((sample_index_.type() == NpyArray::Type::kInt32 || sample_index_.type() == NpyArray::Type::kInt64) &&
                    sample_index_.shape() == (std::vector<int64_t>{rows, 2}),
                where, "sample_index.npy: expected [", rows, ", 2] int32 or int64");
  int64_t previous = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t position = sample_index_[2 * r];
    const int64_t offset = sample_index_[2 * r + 1];
    TESSERA_CHECK(position >= previous && position < document_index_.size(), where, "sample_index.npy: row ", r,
                  " has position ", position, " out of order or range");
    const int64_t length = dataset_->sequence_length(document_index_[position]);
    TESSERA_CHECK(offset >= -1 && offset < std::max<int64_t>(length, 1), where, "sample_index.npy: row ", r,
                  " has offset ", offset, " outside its document of ", length, " tokens");
    previous = position;
  }

  const int64_t total = rows - 1;
  TESSERA_CHECK((shuffle_index_.type() == NpyArray::Type::kUInt32 || shuffle_index_.type() == NpyArray::Type::kInt64) &&
                    shuffle_index_.shape() == std::vector<int64_t>{total},
                where, "shuffle_index.npy: expected [", total, "] uint32 or int64");
  std::vector<bool> seen(static_cast<size_t>(total), false);
  for (int64_t i = 0; i < total; ++i) {
    const int64_t s = shuffle_index_[i];
    TESSERA_CHECK(s >= 0 && s < total && !seen[s], where, "shuffle_index.npy: not a permutation at entry ", i);
    seen[s] = true;
  }
}

std::string small_corpus_hint(const std::string& split) {
  if (split.empty()) return "";
  return "; a corpus this small needs --split 100,0,0 (all of it for training) and --eval-iters 0 (no evaluation), "
         "or more documents";
}

void check_token_ids(std::span<const int32_t> tokens, int64_t vocab_size, const std::string& prefix) {
  if (vocab_size <= 0) return;
  for (const int32_t t : tokens)
    if (t < 0 || t >= vocab_size)
      throw Error(str_cat(prefix, ": token id ", t, " is outside the tokenizer's vocabulary of ", vocab_size,
                          ": the data was likely preprocessed with another tokenizer (give the --tokenizer-type and "
                          "vocabulary it was preprocessed with, or preprocess it again with these)"));
}

void GptDataset::get(int64_t index, std::span<int32_t> out) const {
  const int64_t n = size();
  TESSERA_CHECK(index >= 0 && index < n, dataset_->prefix(), " (", split_name(split_), "): sample ", index,
                " out of range [0, ", n, ")");
  TESSERA_CHECK(static_cast<int64_t>(out.size()) == config_.seq_length + 1, "GptDataset::get: buffer of ",
                out.size(), " tokens, expected seq_length + 1 = ", config_.seq_length + 1);
  // _query_document_sample_shuffle_indices.
  const int64_t sample = shuffle_index_[index];
  const int64_t first = sample_index_[2 * sample], first_offset = sample_index_[2 * sample + 1];
  const int64_t last = sample_index_[2 * sample + 2], last_offset = sample_index_[2 * sample + 3];
  size_t filled = 0;
  auto take = [&](int64_t position, int64_t offset, int64_t length) {
    const int64_t doc = document_index_[position];
    if (length < 0) length = dataset_->sequence_length(doc) - offset;
    TESSERA_CHECK(filled + static_cast<size_t>(length) <= out.size(), dataset_->prefix(), ": sample ", index,
                  " is longer than seq_length + 1 (corrupt index)");
    dataset_->read(doc, offset, out.subspan(filled, static_cast<size_t>(length)));
    filled += static_cast<size_t>(length);
  };
  if (first == last) {
    take(first, first_offset, last_offset - first_offset + 1);
  } else {
    for (int64_t p = first; p <= last; ++p) {
      take(p, p == first ? first_offset : 0, p < last ? -1 : last_offset + 1);
    }
  }
  TESSERA_CHECK(filled == out.size(), dataset_->prefix(), ": sample ", index, " has ", filled, " tokens, expected ",
                out.size(), " (corrupt index)");
  check_token_ids(out, config_.vocab_size, dataset_->prefix());
}

}  // namespace tessera::data
