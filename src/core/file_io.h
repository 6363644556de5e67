// Writing whole buffers to a file descriptor, for the writers that build files atomically
// (safetensors, indexed datasets), and small text files written atomically. Failures are Errors that
// start with the path.
#pragma once

#include <cstddef>
#include <fstream>
#include <string>

namespace tessera {

// An open file descriptor, closed when this goes away; readers that hand out copies of themselves share
// one through a std::shared_ptr (safetensors files, zip archives), so the last copy closes it.
class OwnedFd {
 public:
  explicit OwnedFd(int fd) : fd(fd) {}
  ~OwnedFd();
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  const int fd;
};

// Writes all n bytes (retrying short writes and EINTR).
void write_all(int fd, const void* data, size_t n, const std::string& path);

// Writes `text` to a temporary file beside `path`, syncs it and renames it over `path`: a reader sees
// the old file or the whole new one.
void write_file_atomically(const std::string& path, const std::string& text);

// Opens a file the user named, for reading. A path that is missing, unreadable or a directory (which an
// ifstream opens on Linux and then reads as empty, so a command would go on with no data) is an Error
// "<where>: cannot open the file: <why>"; `where` names the flag and the path ("--valid-data=x").
std::ifstream open_input_file(const std::string& path, const std::string& where,
                              std::ios::openmode mode = std::ios::in);

// A file written under a temporary name beside `path` (PATH.tmp.PID) and renamed over it by commit():
// a reader sees the old file or the whole new one, and an error before commit() (a malformed input
// line) leaves no partial file, as the temporary is removed on destruction. `where` starts the errors
// ("--output=x").
class AtomicOutputFile {
 public:
  AtomicOutputFile(const std::string& path, const std::string& where);
  ~AtomicOutputFile();
  AtomicOutputFile(const AtomicOutputFile&) = delete;
  AtomicOutputFile& operator=(const AtomicOutputFile&) = delete;

  std::ofstream& stream() { return out_; }
  void commit();  // closes the stream, checks that every write succeeded and renames it into place

 private:
  std::string path_, temporary_, where_;
  std::ofstream out_;
  bool committed_ = false;
};

}  // namespace tessera
