#include "core/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/check.h"

namespace tessera {

OwnedFd::~OwnedFd() { ::close(fd); }

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

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(str_cat(path, ": cannot create ", temporary, ": ", std::strerror(errno)));
  try {
    write_all(fd, text.data(), text.size(), temporary);
    if (::fsync(fd) != 0) throw Error(str_cat(temporary, ": fsync failed: ", std::strerror(errno)));
  } catch (...) {
    ::close(fd);
    ::unlink(temporary.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(temporary.c_str());
    throw Error(str_cat(path, ": cannot rename ", temporary, " to it: ", std::strerror(e)));
  }
}

std::ifstream open_input_file(const std::string& path, const std::string& where, std::ios::openmode mode) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw Error(str_cat(where, ": cannot open the file: it is a directory"));
  errno = 0;
  std::ifstream in(path, mode);
  if (!in.is_open())
    throw Error(str_cat(where, ": cannot open the file", errno ? str_cat(": ", std::strerror(errno)) : ""));
  return in;
}

AtomicOutputFile::AtomicOutputFile(const std::string& path, const std::string& where)
    : path_(path), temporary_(path + ".tmp." + std::to_string(::getpid())), where_(where) {
  errno = 0;
  out_.open(temporary_, std::ios::binary | std::ios::trunc);
  if (!out_.is_open()) throw Error(str_cat(where_, ": cannot create ", temporary_, ": ", std::strerror(errno)));
}

AtomicOutputFile::~AtomicOutputFile() {
  if (committed_) return;
  out_.close();
  std::remove(temporary_.c_str());
}

void AtomicOutputFile::commit() {
  out_.close();
  if (!out_.good()) throw Error(str_cat(where_, ": writing ", temporary_, " failed"));
  if (std::rename(temporary_.c_str(), path_.c_str()) != 0)
    throw Error(str_cat(where_, ": cannot rename ", temporary_, " to it: ", std::strerror(errno)));
  committed_ = true;
}

}  // namespace tessera
