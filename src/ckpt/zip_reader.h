// Reading the zip archives torch.save writes (PyTorch >= 1.6: `<name>/data.pkl` and one
// `<name>/data/<key>` entry per storage), as Megatron's legacy checkpoints and DCP's neighbours are.
// torch.save stores every entry uncompressed, so this reads stored entries only: the end of central
// directory record (and the zip64 locator and record, plus zip64 extra fields, for archives or entries
// past 4 GiB), the central directory and each entry's local header. Entries are read by offset with
// pread, never the whole archive in memory, since a checkpoint file can be tens of GiB.
//
// Every malformed archive (truncated, offsets outside the file, overlapping the directory, names
// duplicated or empty) is a tessera::Error starting with the path and naming the entry.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/file_io.h"

namespace tessera::ckpt {

struct ZipEntry {
  std::string name;
  uint64_t size = 0;         // bytes of the (stored) data
  uint64_t data_offset = 0;  // file offset of the first byte of data, past the local header
  uint16_t method = 0;       // 0 stored; anything else (8: deflate) is refused when the entry is read
  uint32_t crc32 = 0;        // as recorded; not checked (reading would have to touch every byte)
};

class ZipReader {
 public:
  static ZipReader open(const std::string& path);
  // The archive that bytes [base, base + length) of `file` hold (a torch.save written into a stream, as
  // PyTorch's DCP writer writes each item of a .distcp file): its offsets count from `base`, and
  // nothing outside the segment is read. Errors start with `label` instead of the path.
  static ZipReader open_segment(const std::string& file, const std::string& label, uint64_t base, uint64_t length);

  const std::string& path() const { return path_; }
  const std::vector<ZipEntry>& entries() const { return entries_; }
  const ZipEntry* find(const std::string& name) const;  // nullptr if absent
  // The named entry; an Error naming it when it is absent or not stored.
  const ZipEntry& entry(const std::string& name) const;

  // Copies bytes [offset, offset + n) of the entry's data into dst.
  void read(const ZipEntry& entry, uint64_t offset, void* dst, uint64_t n) const;
  // The whole entry, for the small ones (data.pkl, version); `limit` bytes at most.
  std::string read_all(const ZipEntry& entry, uint64_t limit = uint64_t{1} << 30) const;

 private:
  ZipReader() = default;
  void check_stored(const ZipEntry& entry) const;

  std::string path_;
  std::shared_ptr<OwnedFd> fd_;  // the last copy closes it
  uint64_t base_ = 0;            // where the archive starts in the file
  std::vector<ZipEntry> entries_;  // in central directory order
  std::unordered_map<std::string, size_t> by_name_;  // a Megatron file has an entry per tensor storage
};

}  // namespace tessera::ckpt
