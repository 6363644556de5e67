#include "core/file_io.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/check.h"

namespace tessera {

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) throw Error(str_cat(path, ": write failed: ", std::strerror(errno)));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace tessera
