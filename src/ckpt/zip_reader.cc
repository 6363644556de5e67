#include "ckpt/zip_reader.h"

#include "core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/check.h"

namespace tessera::ckpt {
namespace {

constexpr uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50;
constexpr uint32_t kZip64EndSig = 0x06064b50, kZip64LocatorSig = 0x07064b50;
constexpr uint64_t kEndBytes = 22, kCentralBytes = 46, kLocalBytes = 30, kLocatorBytes = 20, kZip64EndBytes = 56;
constexpr uint64_t kMaxComment = 65535;

// Little-endian fields read from a buffer whose bounds the caller has checked.
uint16_t u16(const unsigned char* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t u32(const unsigned char* p) { return u16(p) | (uint32_t{u16(p + 2)} << 16); }
uint64_t u64(const unsigned char* p) { return u32(p) | (uint64_t{u32(p + 4)} << 32); }

void pread_exact(int fd, void* dst, uint64_t n, uint64_t offset, const std::string& path, const std::string& what) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, uint64_t{1} << 30));
    ssize_t r = ::pread(fd, p, chunk, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail_in_file(path, "cannot read ", what, ": ", std::strerror(errno));
    if (r == 0) fail_in_file(path, "truncated: the file ends inside ", what);
    p += r;
    n -= static_cast<uint64_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

// The values a zip64 extra field (id 1) replaces: each is present only when the 32-bit field in the
// fixed header holds its all-ones marker, in this order.
struct Zip64Fields {
  uint64_t size, compressed, local_offset;
};

void apply_zip64_extra(const unsigned char* extra, uint64_t extra_len, Zip64Fields& f, bool size_marked,
                       bool compressed_marked, bool offset_marked, const std::string& path, const std::string& name) {
  uint64_t pos = 0;
  while (pos + 4 <= extra_len) {
    const uint16_t id = u16(extra + pos), len = u16(extra + pos + 2);
    if (pos + 4 + len > extra_len) fail_in_file(path, "entry '", name, "': extra field runs past its header");
    if (id == 1) {
      const unsigned char* p = extra + pos + 4;
      uint64_t left = len;
      auto take = [&](uint64_t& out, const char* what) {
        if (left < 8) fail_in_file(path, "entry '", name, "': zip64 extra field too short for its ", what);
        out = u64(p);
        p += 8;
        left -= 8;
      };
      if (size_marked) take(f.size, "size");
      if (compressed_marked) take(f.compressed, "compressed size");
      if (offset_marked) take(f.local_offset, "local header offset");
      return;
    }
    pos += 4 + len;
  }
  if (size_marked || compressed_marked || offset_marked)
    fail_in_file(path, "entry '", name, "': sizes marked as zip64 but no zip64 extra field");
}

}  // namespace

ZipReader ZipReader::open(const std::string& path) { return open_segment(path, path, 0, UINT64_MAX); }

ZipReader ZipReader::open_segment(const std::string& file, const std::string& label, uint64_t base, uint64_t length) {
  ZipReader z;
  z.path_ = label;
  const std::string& path = label;  // errors name the label ("DIR/__0_0.distcp: item 'key'")
  const int raw_fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (raw_fd < 0) fail_in_file(path, "cannot open: ", std::strerror(errno));
  z.fd_ = std::make_shared<OwnedFd>(raw_fd);
  struct stat st;
  if (::fstat(raw_fd, &st) != 0) fail_in_file(path, "cannot stat: ", std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail_in_file(path, "not a regular file");
  const uint64_t real_size = static_cast<uint64_t>(st.st_size);
  if (base > real_size || (length != UINT64_MAX && length > real_size - base))
    fail_in_file(path, "bytes [", base, ", ", length == UINT64_MAX ? real_size : base + length, ") run past the end of ",
                 file, ", which has ", real_size, " bytes (truncated?)");
  z.base_ = base;
  // Every offset below is relative to the segment's first byte, as a torch.save archive written into a
  // stream records them.
  const uint64_t file_size = length == UINT64_MAX ? real_size - base : length;
  auto read_at = [&](void* dst, uint64_t n, uint64_t offset, const std::string& what) {
    pread_exact(raw_fd, dst, n, base + offset, path, what);
  };
  if (file_size > 0) {
    // A pickle's first byte is 0x80 (PROTO); a zip's is 'P'. Such a file is the pre-1.6 torch.save format.
    unsigned char first;
    read_at(&first, 1, 0, "the first byte");
    if (first == 0x80) fail_in_file(path, "not a zip archive but a bare pickle: the legacy torch.save format of PyTorch < 1.6, which is not read");
  }
  if (file_size < kEndBytes) fail_in_file(path, "file is ", file_size, " bytes, too short for a zip archive");

  // The end record is the last 22 bytes unless a comment follows it, so search back over at most the
  // longest comment for its signature whose comment length reaches exactly to the end.
  const uint64_t tail_len = std::min(file_size, kEndBytes + kMaxComment);
  std::vector<unsigned char> tail(tail_len);
  read_at(tail.data(), tail_len, file_size - tail_len, "the end of central directory");
  int64_t end_pos = -1;
  for (int64_t i = static_cast<int64_t>(tail_len - kEndBytes); i >= 0; --i) {
    const unsigned char* p = tail.data() + i;
    if (u32(p) == kEndSig && static_cast<uint64_t>(i) + kEndBytes + u16(p + 20) == tail_len) {
      end_pos = i;
      break;
    }
  }
  if (end_pos < 0) fail_in_file(path, "not a zip archive (no end of central directory record; truncated?)");
  const unsigned char* end = tail.data() + end_pos;
  const uint64_t end_offset = file_size - tail_len + static_cast<uint64_t>(end_pos);
  if (u16(end + 4) != 0 || u16(end + 6) != 0) fail_in_file(path, "multi-disk zip archives are not supported");
  uint64_t count = u16(end + 10), cd_size = u32(end + 12), cd_offset = u32(end + 16);
  uint64_t cd_end_limit = end_offset;  // the directory must end before the record(s) that describe it

  // A zip64 locator sits just before the end record when any count or offset overflowed (or a writer
  // such as torch's miniz chose it); its record then holds the 64-bit values.
  if (end_offset >= kLocatorBytes) {
    unsigned char loc[kLocatorBytes];
    read_at(loc, kLocatorBytes, end_offset - kLocatorBytes, "the zip64 locator");
    if (u32(loc) == kZip64LocatorSig) {
      const uint64_t rec = u64(loc + 8);
      if (rec > end_offset - kLocatorBytes || end_offset - kLocatorBytes - rec < kZip64EndBytes)
        fail_in_file(path, "zip64 end record offset ", rec, " is outside the file");
      unsigned char r[kZip64EndBytes];
      read_at(r, kZip64EndBytes, rec, "the zip64 end record");
      if (u32(r) != kZip64EndSig) fail_in_file(path, "no zip64 end record at offset ", rec, " where the locator points");
      count = u64(r + 32);
      cd_size = u64(r + 40);
      cd_offset = u64(r + 48);
      cd_end_limit = rec;
    } else if (count == 0xffff || cd_size == 0xffffffffu || cd_offset == 0xffffffffu) {
      fail_in_file(path, "end record marks zip64 values but there is no zip64 locator");
    }
  }
  if (cd_offset > cd_end_limit || cd_size > cd_end_limit - cd_offset)
    fail_in_file(path, "central directory (offset ", cd_offset, ", ", cd_size, " bytes) is outside the file of ", file_size,
         " bytes (truncated?)");
  if (count > cd_size / kCentralBytes)
    fail_in_file(path, "central directory of ", cd_size, " bytes cannot hold the ", count, " entries it claims");

  std::vector<unsigned char> cd(cd_size);
  if (cd_size > 0) read_at(cd.data(), cd_size, cd_offset, "the central directory");
  uint64_t pos = 0;
  z.entries_.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    if (cd_size - pos < kCentralBytes || u32(cd.data() + pos) != kCentralSig)
      fail_in_file(path, "central directory entry ", i, " at offset ", cd_offset + pos, " is malformed");
    const unsigned char* h = cd.data() + pos;
    const uint64_t name_len = u16(h + 28), extra_len = u16(h + 30), comment_len = u16(h + 32);
    if (cd_size - pos - kCentralBytes < name_len + extra_len + comment_len)
      fail_in_file(path, "central directory entry ", i, " runs past the directory");
    ZipEntry e;
    e.name.assign(reinterpret_cast<const char*>(h + kCentralBytes), name_len);
    if (e.name.empty() || e.name.find('\0') != std::string::npos)
      fail_in_file(path, "central directory entry ", i, " has an empty or invalid name");
    if (!z.by_name_.emplace(e.name, z.entries_.size()).second) fail_in_file(path, "entry '", e.name, "' appears twice");
    e.method = u16(h + 10);
    if (u16(h + 8) & 1) e.method = 0xffff;  // encrypted: refused when read, as a compressed one is
    e.crc32 = u32(h + 16);
    Zip64Fields f{u32(h + 24), u32(h + 20), u32(h + 42)};
    apply_zip64_extra(h + kCentralBytes + name_len, extra_len, f, f.size == 0xffffffffu, f.compressed == 0xffffffffu,
                      f.local_offset == 0xffffffffu, path, e.name);
    if (e.method == 0 && f.size != f.compressed)
      fail_in_file(path, "entry '", e.name, "' is stored but its sizes differ (", f.size, " vs ", f.compressed, ")");
    e.size = f.size;

    // The local header repeats the name and may have extra fields of its own (torch pads with one so
    // that data starts 64-byte aligned), so the data starts where the local header says.
    if (f.local_offset > cd_offset || cd_offset - f.local_offset < kLocalBytes)
      fail_in_file(path, "entry '", e.name, "': local header offset ", f.local_offset, " is outside the data area");
    unsigned char l[kLocalBytes];
    read_at(l, kLocalBytes, f.local_offset, str_cat("the local header of entry '", e.name, "'"));
    if (u32(l) != kLocalSig) fail_in_file(path, "entry '", e.name, "': no local header at offset ", f.local_offset);
    const uint64_t local_name_len = u16(l + 26), local_extra_len = u16(l + 28);
    e.data_offset = f.local_offset + kLocalBytes + local_name_len + local_extra_len;
    if (local_name_len != name_len) fail_in_file(path, "entry '", e.name, "': local header names another entry");
    if (e.data_offset > cd_offset || f.compressed > cd_offset - e.data_offset)
      fail_in_file(path, "entry '", e.name, "': data (", f.compressed, " bytes at offset ", e.data_offset,
           ") runs past the data area, which ends at ", cd_offset, " (truncated?)");
    std::string local_name(name_len, '\0');
    read_at(local_name.data(), name_len, f.local_offset + kLocalBytes, "a local header's name");
    if (local_name != e.name) fail_in_file(path, "entry '", e.name, "': local header names '", local_name, "'");
    z.entries_.push_back(std::move(e));
    pos += kCentralBytes + name_len + extra_len + comment_len;
  }
  return z;
}

const ZipEntry* ZipReader::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

const ZipEntry& ZipReader::entry(const std::string& name) const {
  const ZipEntry* e = find(name);
  if (!e) fail_in_file(path_, "no entry '", name, "' in the archive");
  check_stored(*e);
  return *e;
}

void ZipReader::check_stored(const ZipEntry& e) const {
  if (e.method == 0xffff) fail_in_file(path_, "entry '", e.name, "' is encrypted");
  if (e.method != 0)
    fail_in_file(path_, "entry '", e.name, "' is compressed (method ", e.method, e.method == 8 ? ", deflate" : "",
         "); torch.save stores entries uncompressed, and only stored entries are read");
}

void ZipReader::read(const ZipEntry& e, uint64_t offset, void* dst, uint64_t n) const {
  check_stored(e);
  if (offset > e.size || n > e.size - offset)
    fail_in_file(path_, "entry '", e.name, "': bytes [", offset, ", ", offset + n, ") asked of an entry of ", e.size, " bytes");
  if (n > 0) pread_exact(fd_->fd, dst, n, base_ + e.data_offset + offset, path_, str_cat("entry '", e.name, "'"));
}

std::string ZipReader::read_all(const ZipEntry& e, uint64_t limit) const {
  if (e.size > limit) fail_in_file(path_, "entry '", e.name, "' is ", e.size, " bytes, over the ", limit, "-byte limit");
  std::string out(e.size, '\0');
  read(e, 0, out.data(), e.size);
  return out;
}

}  // namespace tessera::ckpt
