#include "ckpt/zip_writer.h"

#include <array>

#include "core/check.h"

namespace tessera::ckpt {
namespace {

// Little-endian fields appended to a header being built.
struct ZipBytes {
  std::string b;
  void u16(uint64_t v) { for (int i = 0; i < 2; ++i) b.push_back(static_cast<char>((v >> (8 * i)) & 0xFF)); }
  void u32(uint64_t v) { for (int i = 0; i < 4; ++i) b.push_back(static_cast<char>((v >> (8 * i)) & 0xFF)); }
  void u64(uint64_t v) { for (int i = 0; i < 8; ++i) b.push_back(static_cast<char>((v >> (8 * i)) & 0xFF)); }
};

constexpr uint64_t kZipAlignment = 64;  // PyTorch's writer aligns every entry's data to 64 bytes
constexpr uint16_t kZipVersion = 45;    // "version needed": 4.5, zip64

const std::array<uint32_t, 256>& zip_crc_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

}  // namespace

uint32_t zip_crc32(const void* data, size_t n, uint32_t crc) {
  const auto& table = zip_crc_table();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

ZipWriter::ZipWriter(const std::string& path)
    : path_(path), out_(std::make_unique<AtomicOutputFile>(path, path)) {}

ZipWriter::ZipWriter(std::string* memory) : path_("(an archive in memory)"), memory_(memory) {}

void ZipWriter::put(const void* data, size_t n) {
  if (memory_) {
    memory_->append(static_cast<const char*>(data), n);
  } else {
    out_->stream().write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
    TESSERA_CHECK(out_->stream().good(), path_, ": write failed");
  }
  offset_ += n;
}

void ZipWriter::add(const std::string& name, const void* data, uint64_t n) {
  TESSERA_CHECK(out_ || memory_, path_, ": the archive was already committed");
  TESSERA_CHECK(!name.empty() && name.size() < 0xFFFF, path_, ": bad entry name '", name, "'");
  Written w{name, n, offset_, zip_crc32(data, n)};
  const bool big = n >= zip64_threshold;
  ZipBytes h;
  h.u32(0x04034b50);
  h.u16(kZipVersion);
  h.u16(0);  // flags
  h.u16(0);  // stored
  h.u16(0);  // time
  h.u16(0x21);  // date: 1980-01-01, as PyTorch's writer leaves it
  h.u32(w.crc);
  h.u32(big ? 0xFFFFFFFFu : n);
  h.u32(big ? 0xFFFFFFFFu : n);
  h.u16(name.size());
  ZipBytes extra;
  if (big) {  // zip64 extended information: the sizes
    extra.u16(0x0001);
    extra.u16(16);
    extra.u64(n);
    extra.u64(n);
  }
  // The padding field PyTorch writes ("FB", then 'Z's) so the data starts at a multiple of 64.
  const uint64_t before = offset_ + 30 + name.size() + extra.b.size() + 4;
  const uint64_t pad = (kZipAlignment - before % kZipAlignment) % kZipAlignment;
  extra.u16(0x4246);
  extra.u16(pad);
  extra.b.append(pad, 'Z');
  h.u16(extra.b.size());
  h.b += name;
  h.b += extra.b;
  put(h.b.data(), h.b.size());
  put(data, n);
  entries_.push_back(std::move(w));
}

void ZipWriter::commit() {
  TESSERA_CHECK(out_ || memory_, path_, ": the archive was already committed");
  const uint64_t directory_offset = offset_;
  for (const Written& w : entries_) {
    const bool big_size = w.size >= zip64_threshold, big_offset = w.header_offset >= zip64_threshold;
    ZipBytes extra;
    if (big_size || big_offset) {
      extra.u16(0x0001);
      extra.u16((big_size ? 16 : 0) + (big_offset ? 8 : 0));
      if (big_size) {
        extra.u64(w.size);
        extra.u64(w.size);
      }
      if (big_offset) extra.u64(w.header_offset);
    }
    ZipBytes h;
    h.u32(0x02014b50);
    h.u16(kZipVersion);  // made by
    h.u16(kZipVersion);  // needed
    h.u16(0);
    h.u16(0);
    h.u16(0);
    h.u16(0x21);
    h.u32(w.crc);
    h.u32(big_size ? 0xFFFFFFFFu : w.size);
    h.u32(big_size ? 0xFFFFFFFFu : w.size);
    h.u16(w.name.size());
    h.u16(extra.b.size());
    h.u16(0);  // comment
    h.u16(0);  // disk
    h.u16(0);  // internal attributes
    h.u32(0);  // external attributes
    h.u32(big_offset ? 0xFFFFFFFFu : w.header_offset);
    h.b += w.name;
    h.b += extra.b;
    put(h.b.data(), h.b.size());
  }
  const uint64_t directory_size = offset_ - directory_offset, count = entries_.size();
  const bool zip64 = count >= 0xFFFF || directory_offset >= zip64_threshold || directory_size >= zip64_threshold;
  ZipBytes end;
  if (zip64) {
    const uint64_t record_offset = offset_;
    end.u32(0x06064b50);  // zip64 end of central directory record
    end.u64(44);
    end.u16(kZipVersion);
    end.u16(kZipVersion);
    end.u32(0);
    end.u32(0);
    end.u64(count);
    end.u64(count);
    end.u64(directory_size);
    end.u64(directory_offset);
    end.u32(0x07064b50);  // its locator
    end.u32(0);
    end.u64(record_offset);
    end.u32(1);
  }
  end.u32(0x06054b50);
  end.u16(0);
  end.u16(0);
  end.u16(zip64 ? 0xFFFF : count);
  end.u16(zip64 ? 0xFFFF : count);
  end.u32(zip64 ? 0xFFFFFFFFu : directory_size);
  end.u32(zip64 ? 0xFFFFFFFFu : directory_offset);
  end.u16(0);
  put(end.b.data(), end.b.size());
  if (out_) out_->commit();
  out_.reset();
  memory_ = nullptr;
}

}  // namespace tessera::ckpt
