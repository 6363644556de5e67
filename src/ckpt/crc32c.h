// CRC-32C (Castagnoli), the checksum of checkpoint files and tensors in the index (the same
// polynomial as iSCSI, ext4 and LevelDB). Uses the SSE4.2 crc32 instruction when the CPU has it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tessera::ckpt {

// Extends `crc` (0 for a new checksum) with n bytes: crc32c(a + b) == crc32c_extend(crc32c(a), b).
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n);
inline uint32_t crc32c(const void* data, size_t n) { return crc32c_extend(0, data, n); }

// The checksum of a whole file, read in blocks. Throws an Error naming the file if it cannot be read.
uint32_t crc32c_file(const std::string& path);

// "crc32c:1a2b3c4d", the form the index records.
std::string crc32c_str(uint32_t crc);

}  // namespace tessera::ckpt
