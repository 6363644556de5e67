// Writing whole buffers to a file descriptor, for the writers that build files atomically
// (safetensors, indexed datasets). Failures are Errors that start with the path.
#pragma once

#include <cstddef>
#include <string>

namespace tessera {

// Writes all n bytes (retrying short writes and EINTR).
void write_all(int fd, const void* data, size_t n, const std::string& path);

}  // namespace tessera
