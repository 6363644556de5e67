#include "train/tensorboard_writer.h"

#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <system_error>

#include "core/check.h"

namespace tessera::train {

static_assert(std::endian::native == std::endian::little, "event files are written little-endian");

namespace {

// Byte-at-a-time table for the reflected Castagnoli polynomial; event files are small, so the
// slicing-by-8 or SSE4.2 variants would not pay for their code.
constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

// Minimal protobuf encoding: just the wire types the Event messages use.
void put_varint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

template <typename T>
void put_le(std::string* out, T v) {  // fixed-width little-endian, for fixed32/fixed64 and framing
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  out->append(bytes, sizeof(T));
}

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_tag(std::string* out, uint32_t field, WireType type) { put_varint(out, (field << 3) | type); }

void put_bytes(std::string* out, uint32_t field, const std::string& bytes) {
  put_tag(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out->append(bytes);
}

// tensorflow.Event fields: wall_time = 1 (double), step = 2 (int64), file_version = 3 (string),
// summary = 5 (Summary).
std::string event_header(int64_t step) {
  double wall_time =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string e;
  put_tag(&e, 1, kFixed64);
  put_le(&e, wall_time);
  put_tag(&e, 2, kVarint);
  put_varint(&e, static_cast<uint64_t>(step));  // negative int64s take ten bytes, as in protobuf
  return e;
}

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = kCrc32cTable[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const std::string& log_dir) {
  std::error_code ec;
  std::filesystem::create_directories(log_dir, ec);
  TESSERA_CHECK(!ec, "--tensorboard-dir=", log_dir, ": cannot create TensorBoard log directory: ", ec.message());
  const std::string base = str_cat((std::filesystem::path(log_dir) / "events.out.tfevents.").string(),
                                   std::time(nullptr), ".", hostname());
  // "x" refuses an existing file, so two writers started in the same second never share one.
  for (int n = 0; file_ == nullptr; ++n) {
    path_ = n == 0 ? base : str_cat(base, ".", n);
    file_ = std::fopen(path_.c_str(), "wbx");
    TESSERA_CHECK(file_ != nullptr || (errno == EEXIST && n < 1000), path_,
                  ": cannot create event file: ", std::strerror(errno));
  }
  // TensorBoard identifies the format from the first event's file_version.
  std::string e = event_header(0);
  put_bytes(&e, 3, "brain.Event:2");
  write_record(e);
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ != nullptr) std::fclose(file_);  // flushes; a destructor has nowhere to report errors
}

void TensorBoardWriter::add_scalar(const std::string& tag, float value, int64_t step) {
  // Summary.Value: tag = 1 (string), simple_value = 2 (float).
  std::string v;
  put_bytes(&v, 1, tag);
  put_tag(&v, 2, kFixed32);
  put_le(&v, value);
  std::string summary;  // Summary: repeated Value value = 1
  put_bytes(&summary, 1, v);
  std::string e = event_header(step);
  put_bytes(&e, 5, summary);
  write_record(e);
}

void TensorBoardWriter::flush() {
  TESSERA_CHECK(std::fflush(file_) == 0, path_, ": flush failed: ", std::strerror(errno));
}

// TFRecord framing: uint64 length, masked CRC of the length bytes, data, masked CRC of the data.
void TensorBoardWriter::write_record(const std::string& data) {
  std::string rec;
  put_le(&rec, uint64_t{data.size()});
  put_le(&rec, masked_crc32c(rec.data(), 8));
  rec.append(data);
  put_le(&rec, masked_crc32c(data.data(), data.size()));
  TESSERA_CHECK(std::fwrite(rec.data(), 1, rec.size(), file_) == rec.size(), path_,
                ": write failed: ", std::strerror(errno));
}

}  // namespace tessera::train
