#include "data/indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <filesystem>
#include <limits>
#include <map>
#include <type_traits>

#include "core/check.h"
#include "core/file_io.h"

namespace tessera::data {

// The format is little-endian and the reader maps it as it lies.
static_assert(std::endian::native == std::endian::little, "MMIDIDX I/O assumes a little-endian host");

namespace {

namespace fs = std::filesystem;

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr uint64_t kVersion = 1;
// magic + version + dtype code + sequence count + document-index count.
constexpr uint64_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;
constexpr size_t kWriteBuffer = 1 << 20;

template <typename... Args>
[[noreturn]] void fail(const std::string& path, const Args&... args) {
  throw Error(str_cat(path, ": ", args...));
}

std::string errno_str() { return std::strerror(errno); }

bool valid_code(uint8_t code) { return code >= 1 && code <= 8; }

void fsync_or_fail(int fd, const std::string& path) {
  if (::fsync(fd) != 0) fail(path, "fsync failed: ", errno_str());
}

// A name beside `path` that no other process writes to.
std::string temporary_name(const std::string& path) { return str_cat(path, ".tmp.", ::getpid()); }

// Token ids -> elements of the .bin dtype (checked by fits_dtype first).
template <typename T>
void convert_tokens(std::span<const int32_t> tokens, char* out) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    T v = static_cast<T>(tokens[i]);
    std::memcpy(out + i * sizeof(T), &v, sizeof(T));
  }
}

// Ids the dtype cannot hold are an error rather than silently wrapped (NumPy's cast would wrap
// them). Checked before anything is written, so a rejected document leaves no bytes behind.
void check_fits(std::span<const int32_t> tokens, TokenDType dtype, const std::string& path) {
  int32_t lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max();
  switch (dtype) {
    case TokenDType::kUInt8: lo = 0, hi = 255; break;
    case TokenDType::kInt8: lo = -128, hi = 127; break;
    case TokenDType::kInt16: lo = -32768, hi = 32767; break;
    case TokenDType::kUInt16: lo = 0, hi = 65535; break;
    default: return;
  }
  for (int32_t t : tokens) {
    if (t < lo || t > hi)
      fail(path, "token id ", t, " does not fit the dataset dtype ", dtype_name(dtype),
           " (a vocabulary of 65500 or more needs int32)");
  }
}

// Element i of a .bin array of `dtype` as int32 (token ids are small integers whatever the dtype).
// Returns false at a value of an int64 or float array that int32 cannot hold (or NaN): wrapping it would
// give a wrong id and casting an out-of-range float is undefined, so the caller refuses the read.
template <typename T>
bool read_tokens(const char* src, std::span<int32_t> out) {
  for (size_t i = 0; i < out.size(); ++i) {
    T v;
    std::memcpy(&v, src + i * sizeof(T), sizeof(T));
    if constexpr (std::is_floating_point_v<T> || sizeof(T) > sizeof(int32_t)) {
      const double d = static_cast<double>(v);  // exact for every int32 and every float
      if (!(d >= -2147483648.0 && d < 2147483648.0)) return false;
    }
    out[i] = static_cast<int32_t>(v);
  }
  return true;
}

}  // namespace

size_t dtype_size(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::kUInt8:
    case TokenDType::kInt8: return 1;
    case TokenDType::kInt16:
    case TokenDType::kUInt16: return 2;
    case TokenDType::kInt32:
    case TokenDType::kFloat32: return 4;
    case TokenDType::kInt64:
    case TokenDType::kFloat64: return 8;
  }
  throw Error(str_cat("unknown token dtype code ", static_cast<int>(dtype)));
}

const char* dtype_name(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::kUInt8: return "uint8";
    case TokenDType::kInt8: return "int8";
    case TokenDType::kInt16: return "int16";
    case TokenDType::kInt32: return "int32";
    case TokenDType::kInt64: return "int64";
    case TokenDType::kFloat64: return "float64";
    case TokenDType::kFloat32: return "float32";
    case TokenDType::kUInt16: return "uint16";
  }
  return "unknown";
}

TokenDType best_dtype(int64_t vocab_size) {
  return vocab_size < 65500 ? TokenDType::kUInt16 : TokenDType::kInt32;
}

// ---- MappedFile ----

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, "cannot open: ", errno_str());
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    std::string err = errno_str();
    ::close(fd);
    fail(path, "cannot stat: ", err);
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > 0) {  // mmap refuses a zero length
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      std::string err = errno_str();
      ::close(fd);
      fail(path, "cannot mmap: ", err);
    }
    data_ = static_cast<const char*>(p);
  }
  ::close(fd);  // the mapping keeps the file alive
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<char*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(const_cast<char*>(data_), size_);
    path_ = std::move(other.path_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

// ---- IndexedDatasetBuilder ----

IndexedDatasetBuilder::IndexedDatasetBuilder(std::string prefix, TokenDType dtype)
    : prefix_(std::move(prefix)), dtype_(dtype) {
  TESSERA_CHECK(valid_code(static_cast<uint8_t>(dtype)), prefix_, ": unknown token dtype code ",
                static_cast<int>(dtype));
  bin_tmp_ = temporary_name(bin_path(prefix_));
  idx_tmp_ = temporary_name(idx_path(prefix_));
  fd_ = ::open(bin_tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail(bin_tmp_, "cannot create: ", errno_str());
  buffer_.reserve(kWriteBuffer);
}

IndexedDatasetBuilder::~IndexedDatasetBuilder() {
  if (fd_ >= 0) ::close(fd_);
  if (!finalized_) {
    std::error_code ec;
    fs::remove(bin_tmp_, ec);
    fs::remove(idx_tmp_, ec);
  }
}

void IndexedDatasetBuilder::flush() {
  write_all(fd_, buffer_.data(), buffer_.size(), bin_tmp_);
  buffer_.clear();
}

void IndexedDatasetBuilder::write_bytes(const void* data, size_t n) {
  if (buffer_.size() + n > kWriteBuffer) flush();
  if (n > kWriteBuffer) {  // large blocks bypass the buffer
    write_all(fd_, data, n, bin_tmp_);
    return;
  }
  const char* p = static_cast<const char*>(data);
  buffer_.insert(buffer_.end(), p, p + n);
}

void IndexedDatasetBuilder::write_tokens(std::span<const int32_t> tokens) {
  TESSERA_CHECK(!finalized_, prefix_, ": dataset already finalized");
  check_fits(tokens, dtype_, prefix_);
  // Converted in chunks so a long document needs no second full-size copy.
  constexpr size_t kChunk = 1 << 16;
  const size_t item = dtype_size(dtype_);
  std::vector<char> chunk(std::min(tokens.size(), kChunk) * item);
  for (size_t begin = 0; begin < tokens.size(); begin += kChunk) {
    auto part = tokens.subspan(begin, std::min(kChunk, tokens.size() - begin));
    char* out = chunk.data();
    switch (dtype_) {
      case TokenDType::kUInt8: convert_tokens<uint8_t>(part, out); break;
      case TokenDType::kInt8: convert_tokens<int8_t>(part, out); break;
      case TokenDType::kInt16: convert_tokens<int16_t>(part, out); break;
      case TokenDType::kUInt16: convert_tokens<uint16_t>(part, out); break;
      case TokenDType::kInt32: convert_tokens<int32_t>(part, out); break;
      case TokenDType::kInt64: convert_tokens<int64_t>(part, out); break;
      case TokenDType::kFloat32: convert_tokens<float>(part, out); break;
      case TokenDType::kFloat64: convert_tokens<double>(part, out); break;
    }
    write_bytes(out, part.size() * item);
  }
  num_tokens_ += static_cast<int64_t>(tokens.size());
}

void IndexedDatasetBuilder::add_item(std::span<const int32_t> tokens) {
  TESSERA_CHECK(tokens.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()), prefix_,
                ": a sequence of ", tokens.size(), " tokens exceeds the format's int32 length");
  write_tokens(tokens);
  sequence_lengths_.push_back(static_cast<int32_t>(tokens.size()));
}

void IndexedDatasetBuilder::end_document() {
  TESSERA_CHECK(!finalized_, prefix_, ": dataset already finalized");
  document_indices_.push_back(num_sequences());
}

void IndexedDatasetBuilder::add_document(std::span<const int32_t> tokens) {
  if (!tokens.empty()) add_item(tokens);
  end_document();
}

void IndexedDatasetBuilder::add_document(std::span<const int32_t> tokens, std::span<const int64_t> lengths) {
  int64_t total = 0;
  for (int64_t len : lengths) {
    TESSERA_CHECK(len >= 0 && len <= std::numeric_limits<int32_t>::max(), prefix_, ": bad sequence length ", len);
    total += len;
  }
  TESSERA_CHECK(total == static_cast<int64_t>(tokens.size()), prefix_, ": document of ", tokens.size(),
                " tokens given sequence lengths summing to ", total);
  write_tokens(tokens);
  for (int64_t len : lengths) sequence_lengths_.push_back(static_cast<int32_t>(len));
  end_document();
}

void IndexedDatasetBuilder::add_index(const std::string& prefix) {
  TESSERA_CHECK(!finalized_, prefix_, ": dataset already finalized");
  IndexedDataset other(prefix);
  TESSERA_CHECK(other.dtype() == dtype_, prefix, ": dtype ", dtype_name(other.dtype()),
                " differs from the merged dataset's ", dtype_name(dtype_));
  const int64_t offset = num_sequences();
  for (int64_t i = 0; i < other.num_sequences(); ++i) sequence_lengths_.push_back(other.sequence_length(i));
  for (int64_t i = 1; i <= other.num_documents(); ++i) document_indices_.push_back(offset + other.document_index(i));
  // Copy exactly the bytes the other index refers to (the whole file for a well-formed dataset).
  const uint64_t bytes = static_cast<uint64_t>(other.num_tokens()) * dtype_size(dtype_);
  flush();
  MappedFile bin(bin_path(prefix));
  write_all(fd_, bin.data(), bytes, bin_tmp_);
  num_tokens_ += other.num_tokens();
}

void IndexedDatasetBuilder::finalize() {
  TESSERA_CHECK(!finalized_, prefix_, ": dataset already finalized");
  flush();
  fsync_or_fail(fd_, bin_tmp_);
  ::close(fd_);
  fd_ = -1;

  // The index is written through the same buffered path: header, then the three arrays.
  int fd = ::open(idx_tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(idx_tmp_, "cannot create: ", errno_str());
  std::vector<char> out;
  out.reserve(kWriteBuffer);
  auto put = [&](const void* p, size_t n) {
    if (out.size() + n > kWriteBuffer) {
      write_all(fd, out.data(), out.size(), idx_tmp_);
      out.clear();
    }
    const char* c = static_cast<const char*>(p);
    out.insert(out.end(), c, c + n);
  };
  const uint64_t version = kVersion;
  const uint8_t code = static_cast<uint8_t>(dtype_);
  const uint64_t sequence_count = sequence_lengths_.size();
  const uint64_t document_count = document_indices_.size();
  put(kMagic, sizeof(kMagic));
  put(&version, 8);
  put(&code, 1);
  put(&sequence_count, 8);
  put(&document_count, 8);
  for (int32_t len : sequence_lengths_) put(&len, 4);
  // Pointers are the running byte offset, as Megatron's _IndexWriter._sequence_pointers computes.
  const int64_t item = static_cast<int64_t>(dtype_size(dtype_));
  int64_t pointer = 0;
  for (int32_t len : sequence_lengths_) {
    put(&pointer, 8);
    pointer += len * item;
  }
  for (int64_t d : document_indices_) put(&d, 8);
  write_all(fd, out.data(), out.size(), idx_tmp_);
  fsync_or_fail(fd, idx_tmp_);
  ::close(fd);

  // Data first, index last: a reader that finds the new index also finds the data it describes.
  for (auto [from, to] : {std::pair{bin_tmp_, bin_path(prefix_)}, std::pair{idx_tmp_, idx_path(prefix_)}}) {
    if (::rename(from.c_str(), to.c_str()) != 0) fail(to, "cannot rename ", from, " into place: ", errno_str());
  }
  finalized_ = true;
}

// ---- IndexedDataset ----

IndexedDataset::IndexedDataset(std::string prefix) : prefix_(std::move(prefix)) {
  const std::string ipath = idx_path(prefix_);
  const std::string bpath = bin_path(prefix_);
  if (!fs::exists(ipath) || !fs::exists(bpath)) {
    // A path to one of the files, where a prefix was meant: say which prefix.
    const fs::path given(prefix_);
    const bool file_given = (given.extension() == ".bin" || given.extension() == ".idx") &&
                            fs::exists(idx_path((fs::path(prefix_).replace_extension()).string()));
    throw Error(str_cat(prefix_, ": dataset not found: needs both ", ipath, " and ", bpath,
                        file_given ? str_cat(" (a dataset is named by its prefix, without .bin or .idx: ",
                                             fs::path(prefix_).replace_extension().string(), ")")
                                   : ""));
  }
  idx_ = MappedFile(ipath);
  bin_ = MappedFile(bpath);

  const char* p = idx_.data();
  const uint64_t size = idx_.size();
  if (size < sizeof(kMagic) || std::memcmp(p, kMagic, sizeof(kMagic)) != 0)
    fail(ipath, "not a Megatron indexed dataset index (magic is not MMIDIDX)");
  if (size < kHeaderBytes) fail(ipath, "truncated: ", size, " bytes, shorter than the ", kHeaderBytes, "-byte header");
  uint64_t version, sequences, doc_entries;
  std::memcpy(&version, p + 9, 8);
  const uint8_t code = static_cast<uint8_t>(p[17]);
  std::memcpy(&sequences, p + 18, 8);
  std::memcpy(&doc_entries, p + 26, 8);
  if (version != kVersion) fail(ipath, "unsupported version ", version, " (only version 1 exists)");
  if (!valid_code(code)) fail(ipath, "unknown dtype code ", static_cast<int>(code), " (Megatron's codes are 1 to 8)");
  dtype_ = static_cast<TokenDType>(code);
  if (doc_entries == 0) fail(ipath, "document index is empty (it must start with 0)");

  // Sizes from counts read off the file: guard the arithmetic before trusting it.
  constexpr uint64_t kMaxCount = uint64_t{1} << 56;
  if (sequences > kMaxCount || doc_entries > kMaxCount)
    fail(ipath, "implausible counts (", sequences, " sequences, ", doc_entries, " document entries)");
  const uint64_t expected = kHeaderBytes + sequences * (4 + 8) + doc_entries * 8;
  // Multimodal datasets append one int8 mode per sequence; those bytes are ignored here.
  if (size < expected)
    fail(ipath, "truncated: ", size, " bytes, but the header's ", sequences, " sequences and ", doc_entries - 1,
         " documents need ", expected);
  if (size != expected && size != expected + sequences)
    fail(ipath, "size ", size, " does not match the header (", expected, " bytes expected)");

  num_sequences_ = static_cast<int64_t>(sequences);
  num_document_indices_ = static_cast<int64_t>(doc_entries);
  lengths_ = p + kHeaderBytes;
  pointers_ = lengths_ + sequences * 4;
  doc_indices_ = pointers_ + sequences * 8;

  // Every sequence must lie inside .bin; checked once here so reads need no checks.
  const int64_t item = static_cast<int64_t>(dtype_size(dtype_));
  const int64_t bin_size = static_cast<int64_t>(bin_.size());
  for (int64_t i = 0; i < num_sequences_; ++i) {
    const int64_t len = sequence_length(i);
    const int64_t ptr = sequence_pointer(i);
    if (len < 0) fail(ipath, "sequence ", i, " has negative length ", len);
    if (ptr < 0 || ptr > bin_size || len > (bin_size - ptr) / item)
      fail(bpath, "too short: ", bin_size, " bytes, but sequence ", i, " (", len, " ", dtype_name(dtype_),
           " tokens at byte ", ptr, ") ends beyond it");
    num_tokens_ += len;
  }
  if (document_index(0) != 0) fail(ipath, "document index starts with ", document_index(0), ", not 0");
  for (int64_t i = 1; i < num_document_indices_; ++i) {
    if (document_index(i) < document_index(i - 1))
      fail(ipath, "document index decreases at entry ", i);
  }
  if (document_index(num_document_indices_ - 1) != num_sequences_)
    fail(ipath, "document index ends at ", document_index(num_document_indices_ - 1), ", not at the ",
         num_sequences_, " sequences");
}

std::vector<int32_t> IndexedDataset::sequence_lengths() const {
  std::vector<int32_t> v(static_cast<size_t>(num_sequences_));
  if (!v.empty()) std::memcpy(v.data(), lengths_, v.size() * 4);
  return v;
}

std::vector<int64_t> IndexedDataset::document_indices() const {
  std::vector<int64_t> v(static_cast<size_t>(num_document_indices_));
  std::memcpy(v.data(), doc_indices_, v.size() * 8);
  return v;
}

std::vector<int32_t> IndexedDataset::get(int64_t sequence, int64_t offset, int64_t length) const {
  TESSERA_CHECK(sequence >= 0 && sequence < num_sequences_, prefix_, ": sequence ", sequence, " out of range [0, ",
                num_sequences_, ")");
  if (length < 0) length = sequence_length(sequence) - offset;
  std::vector<int32_t> out(static_cast<size_t>(std::max<int64_t>(length, 0)));
  read(sequence, offset, out);
  return out;
}

void IndexedDataset::read(int64_t sequence, int64_t offset, std::span<int32_t> out) const {
  TESSERA_CHECK(sequence >= 0 && sequence < num_sequences_, prefix_, ": sequence ", sequence, " out of range [0, ",
                num_sequences_, ")");
  const int64_t len = sequence_length(sequence);
  const int64_t n = static_cast<int64_t>(out.size());
  TESSERA_CHECK(offset >= 0 && offset <= len && n <= len - offset, prefix_, ": tokens [", offset, ", ", offset + n,
                ") out of range of sequence ", sequence, " (length ", len, ")");
  const char* src = bin_.data() + sequence_pointer(sequence) + offset * static_cast<int64_t>(dtype_size(dtype_));
  bool ok = true;
  switch (dtype_) {
    case TokenDType::kUInt8: ok = read_tokens<uint8_t>(src, out); break;
    case TokenDType::kInt8: ok = read_tokens<int8_t>(src, out); break;
    case TokenDType::kInt16: ok = read_tokens<int16_t>(src, out); break;
    case TokenDType::kUInt16: ok = read_tokens<uint16_t>(src, out); break;
    case TokenDType::kInt32: ok = read_tokens<int32_t>(src, out); break;
    case TokenDType::kInt64: ok = read_tokens<int64_t>(src, out); break;
    case TokenDType::kFloat32: ok = read_tokens<float>(src, out); break;
    case TokenDType::kFloat64: ok = read_tokens<double>(src, out); break;
  }
  TESSERA_CHECK(ok, bin_path(prefix_), ": sequence ", sequence, " holds a ", dtype_name(dtype_),
                " value outside the int32 range of token ids, in tokens [", offset, ", ", offset + n, ")");
}

// ---- merging ----

void merge_datasets(const std::vector<std::string>& input_prefixes, const std::string& output_prefix) {
  TESSERA_CHECK(!input_prefixes.empty(), output_prefix, ": no datasets to merge");
  // The first dataset decides the dtype, as in merge_datasets.py.
  const TokenDType dtype = IndexedDataset(input_prefixes.front()).dtype();
  IndexedDatasetBuilder builder(output_prefix, dtype);
  for (const std::string& prefix : input_prefixes) builder.add_index(prefix);
  builder.finalize();
}

std::vector<std::string> find_dataset_prefixes(const std::string& directory) {
  TESSERA_CHECK(fs::is_directory(directory), directory, ": not a directory");
  // name -> {has .idx, has .bin}; std::map sorts by bytes, which for UTF-8 is Python's code-point order.
  std::map<std::string, std::pair<bool, bool>> found;
  for (const auto& entry : fs::directory_iterator(directory)) {
    if (!entry.is_regular_file()) continue;
    const fs::path& path = entry.path();
    const std::string ext = path.extension().string();
    if (ext != ".idx" && ext != ".bin") continue;
    auto& f = found[(path.parent_path() / path.stem()).string()];
    (ext == ".idx" ? f.first : f.second) = true;
  }
  std::vector<std::string> prefixes;
  for (const auto& [prefix, has] : found) {
    if (!has.first) throw Error(str_cat(prefix, ".bin: no matching .idx file"));
    if (!has.second) throw Error(str_cat(prefix, ".idx: no matching .bin file"));
    prefixes.push_back(prefix);
  }
  return prefixes;
}

}  // namespace tessera::data
