// libFuzzer target: ckpt::ZipReader::open on arbitrary bytes, every entry read, then the same file
// through ckpt::load_torch_file (zip, data.pkl's pickle, storages, views). Any input must be read or
// give a tessera::Error; a crash, a sanitizer report or another exception is a bug. Built and run by
// scripts/fuzz.sh.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "ckpt/torch_file.h"
#include "ckpt/zip_reader.h"
#include "core/check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The readers work on files (pread), so each input goes through one, in memory when /dev/shm exists.
  static const std::string path = std::string(::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") +
                                  "/tessera_zip_fuzz_" + std::to_string(::getpid()) + ".pt";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    tessera::ckpt::ZipReader z = tessera::ckpt::ZipReader::open(path);
    for (const tessera::ckpt::ZipEntry& e : z.entries()) {
      if (e.method == 0 && e.size > size) __builtin_trap();  // a stored entry larger than the file passed
      try {
        (void)z.read_all(z.entry(e.name));
      } catch (const tessera::Error&) {  // a compressed entry: refused by name, the others still read
      }
    }
  } catch (const tessera::Error&) {
  }
  try {
    tessera::ckpt::StateNode sd = tessera::ckpt::load_torch_file(path);
    (void)sd.find("model");
  } catch (const tessera::Error&) {
  }
  return 0;
}
