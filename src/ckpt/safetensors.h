// Reading and writing the Hugging Face safetensors format
// (https://huggingface.co/docs/safetensors): an 8-byte little-endian header length N, N bytes of
// JSON describing each tensor's dtype, shape and byte range, then the raw tensor bytes.
//
// Files are written atomically (temporary file, fsync, rename), so a crash mid-write leaves either
// the old file or the new one. Reading validates the whole header when the file is opened, so a
// corrupt or truncated file is reported as a tessera::Error naming the file, never a crash.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/file_io.h"
#include "core/tensor.h"

namespace tessera::ckpt {

// "F32", "BF16", "F16", "I32", "I64": the dtype strings the safetensors spec uses.
const char* safetensors_dtype_name(DType dt);

// Writes `tensors` (CPU tensors; names unique and not "__metadata__") in the given order, and
// `metadata` as the header's "__metadata__" object when it is not empty. Returns the CRC-32C of the
// bytes written (the whole file).
uint32_t write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                           const std::map<std::string, std::string>& metadata = {});

class SafetensorsFile {
 public:
  // Opens and validates the header; tensor data is read on demand.
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  Shape shape(const std::string& name) const { return entry(name).shape; }
  DType dtype(const std::string& name) const { return entry(name).dtype; }

  // A new CPU tensor holding the named tensor.
  Tensor read(const std::string& name) const;
  // F8_E4M3 tensors (DeepSeek-V3's FP8 weights; no Tessera DType): read() refuses them, this decodes one
  // into an fp32 tensor (exactly: every E4M3 value is an fp32). dtype() of such a tensor is not meaningful.
  bool is_fp8_e4m3(const std::string& name) const { return entry(name).fp8_e4m3; }
  Tensor read_fp8_e4m3(const std::string& name) const;
  // Reads the named tensor into `dst`, which must have the same shape and dtype.
  void read_into(const std::string& name, const Tensor& dst) const;

 private:
  struct Entry {
    DType dtype;
    Shape shape;
    uint64_t begin;  // byte range within the data buffer
    uint64_t end;
    bool fp8_e4m3 = false;  // F8_E4M3: dtype unset, one byte an element
  };

  SafetensorsFile() = default;
  const Entry& entry(const std::string& name) const;

  std::string path_;
  std::shared_ptr<OwnedFd> fd_;  // the last copy closes it
  uint64_t data_start_ = 0;  // file offset of the data buffer: 8 + header length
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace tessera::ckpt
