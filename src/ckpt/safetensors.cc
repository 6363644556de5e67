#include "ckpt/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "ckpt/crc32c.h"
#include "core/file_io.h"

namespace tessera::ckpt {

// Tensor bytes are copied to and from the file as they lie in memory, and the format is
// little-endian.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

// The reference implementation refuses headers above 100 MB; so do we, before allocating them.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kMetadataKey = "__metadata__";

std::string errno_str() { return std::strerror(errno); }

bool parse_dtype(const std::string& s, DType* dt) {
  for (DType d : {DType::F32, DType::BF16, DType::F16, DType::I32, DType::I64}) {
    if (s == safetensors_dtype_name(d)) {
      *dt = d;
      return true;
    }
  }
  return false;
}

// pread() exactly n bytes at `offset`, retrying short reads.
void read_exact(int fd, void* buf, size_t n, uint64_t offset, const std::string& path,
                const std::string& what) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail_in_file(path, "reading ", what, " failed: ", errno_str());
    if (r == 0) fail_in_file(path, "file ended while reading ", what);
    p += r;
    offset += static_cast<uint64_t>(r);
    n -= static_cast<size_t>(r);
  }
}

// Makes a completed rename durable. Best effort: some file systems cannot fsync a directory, and
// the new file's contents are already on disk.
void sync_parent_dir(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

const char* safetensors_dtype_name(DType dt) {
  switch (dt) {
    case DType::F32:
      return "F32";
    case DType::BF16:
      return "BF16";
    case DType::F16:
      return "F16";
    case DType::I32:
      return "I32";
    case DType::I64:
      return "I64";
  }
  return "?";
}

uint32_t write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                           const std::map<std::string, std::string>& metadata) {
  // ordered_json keeps the header in data order, which makes files easy to inspect.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  uint64_t offset = 0;
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    TESSERA_CHECK(name != kMetadataKey, path, ": '", kMetadataKey, "' is reserved and cannot name a tensor");
    TESSERA_CHECK(seen.insert(name).second, path, ": duplicate tensor name '", name, "'");
    TESSERA_CHECK(t.defined(), path, ": tensor '", name, "' is undefined");
    TESSERA_CHECK(t.device().type == DeviceType::CPU, path, ": tensor '", name, "' is on ", t.device().str(),
                  "; copy it to the CPU before saving");
    header[name] = {{"dtype", safetensors_dtype_name(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string json;
  try {
    json = header.dump();
  } catch (const nlohmann::json::exception& e) {  // e.g. a name that is not valid UTF-8
    fail_in_file(path, "cannot encode the header: ", e.what());
  }
  // The spec pads the header with spaces so the data buffer starts 8-byte aligned.
  json.append((8 - json.size() % 8) % 8, ' ');
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(uint64_t{json.size()} >> (8 * i));

  const std::string tmp = path + ".tmp";
  uint32_t crc = 0;
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_in_file(tmp, "cannot create: ", errno_str());
  try {
    write_all(fd, len, sizeof(len), tmp);
    write_all(fd, json.data(), json.size(), tmp);
    crc = crc32c_extend(crc32c(len, sizeof(len)), json.data(), json.size());
    for (const auto& [name, t] : tensors) {
      write_all(fd, t.host_raw(), t.nbytes(), tmp);
      crc = crc32c_extend(crc, t.host_raw(), t.nbytes());
    }
    if (::fsync(fd) != 0) fail_in_file(tmp, "fsync failed: ", errno_str());
    int rc = ::close(fd);
    fd = -1;
    if (rc != 0) fail_in_file(tmp, "close failed: ", errno_str());
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      fail_in_file(path, "cannot rename ", tmp, " into place: ", errno_str());
    }
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  sync_parent_dir(path);
  return crc;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_in_file(path, "cannot open: ", errno_str());
  f.fd_ = std::make_shared<OwnedFd>(fd);

  struct stat st;
  if (::fstat(fd, &st) != 0) fail_in_file(path, "cannot stat: ", errno_str());
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) fail_in_file(path, "file is ", file_size, " bytes, too short for a safetensors header");
  unsigned char len[8];
  read_exact(fd, len, 8, 0, path, "the header length");
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= uint64_t{len[i]} << (8 * i);
  if (header_len > kMaxHeaderBytes) fail_in_file(path, "header length ", header_len, " exceeds the 100 MB limit");
  if (header_len > file_size - 8) {
    fail_in_file(path, "header length ", header_len, " runs past the end of the ", file_size, "-byte file");
  }
  f.data_start_ = 8 + header_len;
  const uint64_t data_size = file_size - f.data_start_;

  std::string text(header_len, '\0');
  read_exact(fd, text.data(), header_len, 8, path, "the header");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number beyond a double
    fail_in_file(path, "header is not valid JSON: ", e.what());
  }
  if (!header.is_object()) fail_in_file(path, "header is not a JSON object");

  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey) {
      if (!value.is_object()) fail_in_file(path, "'", kMetadataKey, "' is not an object");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) fail_in_file(path, "metadata value for '", k, "' is not a string");
        f.metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string& tensor_name = name;  // clang 14 (the fuzz build) cannot capture a structured binding
    auto bad = [&](const auto&... why) { fail_in_file(path, "tensor '", tensor_name, "': ", why...); };
    if (!value.is_object()) bad("entry is not an object");
    auto dtype = value.find("dtype");
    auto shape = value.find("shape");
    auto offsets = value.find("data_offsets");
    if (dtype == value.end() || !dtype->is_string()) bad("missing string field 'dtype'");
    if (shape == value.end() || !shape->is_array()) bad("missing array field 'shape'");
    if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2) {
      bad("missing field 'data_offsets' of two offsets");
    }
    Entry e;
    // DeepSeek-V3's FP8 weights: Tessera has no such DType, so they are read only by read_fp8_e4m3.
    e.fp8_e4m3 = dtype->get<std::string>() == "F8_E4M3";
    e.dtype = DType::F32;  // for an F8_E4M3 one, only so that the field is set
    if (!e.fp8_e4m3 && !parse_dtype(dtype->get<std::string>(), &e.dtype)) {
      bad("unsupported dtype '", dtype->get<std::string>(), "'");
    }
    const uint64_t element_bytes = e.fp8_e4m3 ? 1 : dtype_size(e.dtype);
    // Count elements in uint64 with overflow checks, since the dimensions come from the file.
    uint64_t numel = 1;
    for (const auto& d : *shape) {
      if (!d.is_number_unsigned()) {
        bad("shape ", shape->dump(), " has an entry that is not a non-negative integer");
      }
      uint64_t dim = d.get<uint64_t>();
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          __builtin_mul_overflow(numel, dim, &numel)) {
        bad("shape ", shape->dump(), " is too large");
      }
      e.shape.push_back(static_cast<int64_t>(dim));
    }
    for (const auto& o : *offsets) {
      if (!o.is_number_unsigned()) bad("data_offsets ", offsets->dump(), " are not non-negative integers");
    }
    e.begin = (*offsets)[0].get<uint64_t>();
    e.end = (*offsets)[1].get<uint64_t>();
    if (e.end < e.begin) bad("data_offsets [", e.begin, ", ", e.end, "] end before they begin");
    if (e.end > data_size) {
      bad("data_offsets [", e.begin, ", ", e.end, "] run past the ", data_size, "-byte data buffer");
    }
    uint64_t nbytes;
    if (__builtin_mul_overflow(numel, element_bytes, &nbytes) || nbytes != e.end - e.begin) {
      bad("data_offsets [", e.begin, ", ", e.end, "] hold ", e.end - e.begin, " bytes, but ",
          dtype->get<std::string>(), " shape ", shape_str(e.shape), " needs ", numel, " elements of ",
          element_bytes, " bytes");
    }
    f.entries_.emplace(name, std::move(e));
  }

  // The spec requires the tensors to tile the data buffer exactly: no overlap, no gaps, no tail.
  std::vector<std::pair<const std::string*, const Entry*>> by_offset;
  for (const auto& [name, e] : f.entries_) by_offset.emplace_back(&name, &e);
  std::sort(by_offset.begin(), by_offset.end(), [](const auto& a, const auto& b) {
    return std::tie(a.second->begin, a.second->end) < std::tie(b.second->begin, b.second->end);
  });
  uint64_t covered = 0;
  const std::string* prev = nullptr;
  for (const auto& [name, e] : by_offset) {
    if (e->begin < covered) fail_in_file(path, "tensors '", *prev, "' and '", *name, "' overlap in the data buffer");
    if (e->begin > covered) {
      fail_in_file(path, "bytes [", covered, ", ", e->begin, ") of the data buffer belong to no tensor");
    }
    covered = e->end;
    prev = name;
  }
  if (covered != data_size) {
    fail_in_file(path, "bytes [", covered, ", ", data_size, ") of the data buffer belong to no tensor");
  }
  return f;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [name, e] : entries_) out.push_back(name);
  return out;
}

const SafetensorsFile::Entry& SafetensorsFile::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) fail_in_file(path_, "no tensor named '", name, "'");
  return it->second;
}

Tensor SafetensorsFile::read(const std::string& name) const {
  const Entry& e = entry(name);
  Tensor t = Tensor::empty(e.shape, e.dtype);
  read_into(name, t);
  return t;
}

Tensor SafetensorsFile::read_fp8_e4m3(const std::string& name) const {
  const Entry& e = entry(name);
  TESSERA_CHECK(e.fp8_e4m3, path_, ": tensor '", name, "' is ", dtype_name(e.dtype), ", not F8_E4M3");
  std::vector<uint8_t> bytes(static_cast<size_t>(e.end - e.begin));
  read_exact(fd_->fd, bytes.data(), bytes.size(), data_start_ + e.begin, path_, str_cat("tensor '", name, "'"));
  Tensor t = Tensor::empty(e.shape);
  // OCP FP8 E4M3 ("fn": no infinities): sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 is
  // subnormal (m/8 x 2^-6), S.1111.111 is NaN. Every value is exact in fp32.
  for (size_t i = 0; i < bytes.size(); ++i) {
    const int b = bytes[i], exponent = (b >> 3) & 15, mantissa = b & 7;
    float v = exponent == 15 && mantissa == 7 ? std::numeric_limits<float>::quiet_NaN()
              : exponent == 0                 ? std::ldexp(static_cast<float>(mantissa), -9)
                                              : std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);
    t.host_f32()[i] = b & 128 ? -v : v;
  }
  return t;
}

void SafetensorsFile::read_into(const std::string& name, const Tensor& dst) const {
  const Entry& e = entry(name);
  TESSERA_CHECK(!e.fp8_e4m3, path_, ": tensor '", name, "' is F8_E4M3, which only read_fp8_e4m3 reads");
  TESSERA_CHECK(dst.defined(), path_, ": read_into '", name, "': destination tensor is undefined");
  TESSERA_CHECK(dst.device().type == DeviceType::CPU, path_, ": read_into '", name, "': destination is on ",
                dst.device().str(), ", not the CPU");
  if (dst.shape() != e.shape || dst.dtype() != e.dtype) {
    fail_in_file(path_, "read_into '", name, "': file has ", dtype_name(e.dtype), " ", shape_str(e.shape),
         ", destination is ", dtype_name(dst.dtype()), " ", shape_str(dst.shape()));
  }
  read_exact(fd_->fd, dst.host_raw(), static_cast<size_t>(e.end - e.begin), data_start_ + e.begin, path_,
             str_cat("tensor '", name, "'"));
}

}  // namespace tessera::ckpt
