// Megatron-LM's indexed dataset: token sequences in `prefix.bin` and their index in `prefix.idx`,
// byte for byte the MMIDIDX format of megatron/core/datasets/indexed_dataset.py, so files written
// here load in Megatron and files Megatron's tools/preprocess_data.py wrote load here.
//
// prefix.idx, all little-endian:
//   9 bytes  "MMIDIDX\0\0"
//   uint64   version, 1
//   uint8    dtype code of the tokens in .bin (TokenDType)
//   uint64   S, the number of sequences
//   uint64   D, the number of document indices (documents + 1)
//   int32[S] sequence lengths, in tokens
//   int64[S] sequence pointers, byte offsets into .bin
//   int64[D] document indices: 0, then the sequence count at the end of each document
// prefix.bin: the tokens of every sequence, back to back, in the dtype.
//
// A "sequence" is what GPTDataset samples from; a document is one or more sequences (more only
// when sentences were split). Megatron's GPT pipeline works on sequences.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace tessera::data {

// Megatron's DType codes for the tokens in .bin.
enum class TokenDType : uint8_t {
  kUInt8 = 1,
  kInt8 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kFloat64 = 6,
  kFloat32 = 7,
  kUInt16 = 8,
};

size_t dtype_size(TokenDType dtype);
// NumPy's name of the dtype ("uint16", ...).
const char* dtype_name(TokenDType dtype);
// The dtype for token ids below `vocab_size`, as Megatron's preprocess_data.py chooses it
// (DType.optimal_dtype): uint16 when vocab_size < 65500, else int32.
TokenDType best_dtype(int64_t vocab_size);

inline std::string idx_path(const std::string& prefix) { return prefix + ".idx"; }
inline std::string bin_path(const std::string& prefix) { return prefix + ".bin"; }

// A read-only memory map of a whole file (empty files map to nothing). Throws tessera::Error
// naming the path when the file cannot be opened or mapped.
class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const char* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const char* data_ = nullptr;
  uint64_t size_ = 0;
};

// Writes a dataset as Megatron's IndexedDatasetBuilder does. Tokens stream to a temporary file
// beside prefix.bin; finalize() writes the index and renames both into place, so a crash never
// leaves a half-written dataset under the final names. Only the per-sequence index (12 bytes per
// sequence) is held in memory.
class IndexedDatasetBuilder {
 public:
  IndexedDatasetBuilder(std::string prefix, TokenDType dtype);
  // Removes the temporary files if finalize() was not reached.
  ~IndexedDatasetBuilder();
  IndexedDatasetBuilder(const IndexedDatasetBuilder&) = delete;
  IndexedDatasetBuilder& operator=(const IndexedDatasetBuilder&) = delete;

  // One sequence; the document stays open until end_document() (Megatron's add_item).
  void add_item(std::span<const int32_t> tokens);
  // Closes the current document (Megatron's end_document).
  void end_document();
  // A whole document as one sequence, as preprocess_data.py writes it without --split-sentences:
  // Megatron drops empty sentences, so an empty document is a document of no sequences.
  void add_document(std::span<const int32_t> tokens);
  // A whole document made of sequences of the given lengths (Megatron's add_document).
  void add_document(std::span<const int32_t> tokens, std::span<const int64_t> lengths);
  // Appends every sequence and document of the dataset at `prefix`, whose dtype must match
  // (Megatron's add_index).
  void add_index(const std::string& prefix);
  // Writes prefix.idx and moves both files into place. Nothing may be added afterwards.
  void finalize();

  int64_t num_sequences() const { return static_cast<int64_t>(sequence_lengths_.size()); }
  int64_t num_documents() const { return static_cast<int64_t>(document_indices_.size()) - 1; }
  int64_t num_tokens() const { return num_tokens_; }
  TokenDType dtype() const { return dtype_; }

 private:
  void write_tokens(std::span<const int32_t> tokens);
  void write_bytes(const void* data, size_t n);
  void flush();

  std::string prefix_;
  TokenDType dtype_;
  std::string bin_tmp_;
  std::string idx_tmp_;
  int fd_ = -1;
  std::vector<char> buffer_;  // pending .bin bytes
  std::vector<int32_t> sequence_lengths_;
  std::vector<int64_t> document_indices_{0};
  int64_t num_tokens_ = 0;
  bool finalized_ = false;
};

// A dataset opened read-only: both files are memory-mapped and the index is validated when it is
// opened (magic, version, dtype code, sizes of both files, pointer ranges, document indices), so
// later reads need no checks beyond their arguments. Errors name the file and the problem.
class IndexedDataset {
 public:
  explicit IndexedDataset(std::string prefix);

  const std::string& prefix() const { return prefix_; }
  TokenDType dtype() const { return dtype_; }
  int64_t num_sequences() const { return num_sequences_; }
  // Documents, i.e. entries of the document index minus its leading 0.
  int64_t num_documents() const { return num_document_indices_ - 1; }
  int64_t num_tokens() const { return num_tokens_; }

  int32_t sequence_length(int64_t sequence) const { return load<int32_t>(lengths_, sequence); }
  int64_t sequence_pointer(int64_t sequence) const { return load<int64_t>(pointers_, sequence); }
  // Entry i of the document index (0 <= i <= num_documents()).
  int64_t document_index(int64_t i) const { return load<int64_t>(doc_indices_, i); }
  // Copies of the three arrays (the mapped ones are unaligned: they start at byte 34).
  std::vector<int32_t> sequence_lengths() const;
  std::vector<int64_t> document_indices() const;

  // Tokens [offset, offset + length) of a sequence as int32 (Megatron's get(idx, offset, length));
  // length -1 means to the end of the sequence. Throws on ranges outside the sequence.
  std::vector<int32_t> get(int64_t sequence, int64_t offset = 0, int64_t length = -1) const;
  // The same into `out`, which must hold exactly `length` tokens.
  void read(int64_t sequence, int64_t offset, std::span<int32_t> out) const;

 private:
  // The index arrays sit at unaligned offsets, so elements are copied out with memcpy.
  template <typename T>
  static T load(const char* base, int64_t i) {
    T v;
    std::memcpy(&v, base + static_cast<size_t>(i) * sizeof(T), sizeof(T));
    return v;
  }

  std::string prefix_;
  MappedFile idx_;
  MappedFile bin_;
  TokenDType dtype_ = TokenDType::kInt32;
  int64_t num_sequences_ = 0;
  int64_t num_document_indices_ = 0;
  int64_t num_tokens_ = 0;
  const char* lengths_ = nullptr;
  const char* pointers_ = nullptr;
  const char* doc_indices_ = nullptr;
};

// Megatron's tools/merge_datasets.py: concatenates the datasets at `input_prefixes`, in order, into
// one at `output_prefix`. All must share a dtype.
void merge_datasets(const std::vector<std::string>& input_prefixes, const std::string& output_prefix);

// The dataset prefixes in a directory, sorted, as merge_datasets.py --input lists them: every
// `name.idx`/`name.bin` pair. A file of one kind without the other is an error.
std::vector<std::string> find_dataset_prefixes(const std::string& directory);

}  // namespace tessera::data
