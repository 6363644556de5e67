// libFuzzer target: Hugging Face model.safetensors.index.json as `tessera convert --loader hf` reads it
// (ckpt::parse_hf_shard_index), on arbitrary text. Any text must give the shard files or a
// tessera::Error; every file named must be a plain name inside the model directory, each once.
// Built and run by scripts/fuzz.sh.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "ckpt/hf_config.h"
#include "core/check.h"

namespace {
void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "hf_shard_index_fuzzer: invariant broken: %s\n", what);
  std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const std::vector<std::string> files = tessera::ckpt::parse_hf_shard_index(
        std::string(reinterpret_cast<const char*>(data), size), "model.safetensors.index.json");
    for (const std::string& f : files)
      require(!f.empty() && f != "." && f != ".." && f.find('/') == std::string::npos &&
                  f.find('\0') == std::string::npos,
              "a shard is a plain file name");
    require(std::set<std::string>(files.begin(), files.end()).size() == files.size(), "each shard is listed once");
  } catch (const tessera::Error&) {
  }
  return 0;
}
