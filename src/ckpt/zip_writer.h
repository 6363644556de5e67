// Writing the zip archives torch.save writes (the inverse of zip_reader.h): every entry stored
// (uncompressed), its data aligned to 64 bytes by a padding extra field in the local header as PyTorch's
// writer pads it (so a reader may map storages in place), and zip64 records for an entry or an offset
// past 4 GiB and for the archive's end when needed. Entries are written as they are added, through an
// AtomicOutputFile: the archive is never whole in memory, and a reader sees the old file or the
// complete new one (commit() writes the central directory and renames it into place).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/file_io.h"

namespace tessera::ckpt {

// zlib's CRC-32 (the zip checksum; not CRC-32C), continued from `crc` over n bytes.
uint32_t zip_crc32(const void* data, size_t n, uint32_t crc = 0);

class ZipWriter {
 public:
  explicit ZipWriter(const std::string& path);
  // Appends the archive to *memory instead (an item of a DCP data file, which holds archives one after
  // another); commit() ends it there.
  explicit ZipWriter(std::string* memory);

  // Appends a stored entry holding bytes [data, data + n).
  void add(const std::string& name, const void* data, uint64_t n);
  void add(const std::string& name, const std::string& bytes) { add(name, bytes.data(), bytes.size()); }
  // Writes the central directory and renames the archive into place. Without it nothing is left behind.
  void commit();

  // Entries or offsets at or past this use zip64 fields (a test lowers it to exercise them on small files).
  uint64_t zip64_threshold = 0xFFFFFFFFu;

 private:
  struct Written {
    std::string name;
    uint64_t size = 0, header_offset = 0;
    uint32_t crc = 0;
  };
  void put(const void* data, size_t n);

  std::string path_;
  std::unique_ptr<AtomicOutputFile> out_;
  std::string* memory_ = nullptr;
  uint64_t offset_ = 0;
  std::vector<Written> entries_;
};

}  // namespace tessera::ckpt
