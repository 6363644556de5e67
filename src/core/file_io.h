// Writing whole buffers to a file descriptor, for the writers that build files atomically
// (safetensors, indexed datasets), and small text files written atomically. Failures are Errors that
// start with the path.
#pragma once

#include <cstddef>
#include <string>

namespace tessera {

// Writes all n bytes (retrying short writes and EINTR).
void write_all(int fd, const void* data, size_t n, const std::string& path);

// Writes `text` to a temporary file beside `path`, syncs it and renames it over `path`: a reader sees
// the old file or the whole new one.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace tessera
