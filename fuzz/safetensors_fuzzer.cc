// libFuzzer target: SafetensorsFile::open and read on arbitrary bytes. Any input must give either a
// valid file or a tessera::Error; a crash, a sanitizer report or another exception is a bug.
// Built and run by scripts/fuzz.sh.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "ckpt/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The reader works on files (pread), so each input goes through one, in memory when /dev/shm exists.
  static const std::string path = std::string(::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") +
                                  "/tessera_safetensors_fuzz_" + std::to_string(::getpid()) + ".safetensors";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    auto file = tessera::ckpt::SafetensorsFile::open(path);
    for (const std::string& name : file.names()) {
      tessera::Tensor t = file.read(name);
      if (t.nbytes() > 0) (void)static_cast<volatile const char*>(t.raw())[t.nbytes() - 1];
    }
    (void)file.metadata().size();
  } catch (const tessera::Error&) {
  }
  return 0;
}
