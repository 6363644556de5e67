// libFuzzer target: the .idx reader of Megatron's indexed dataset (IndexedDataset) on arbitrary bytes.
// Input: byte 0 gives the size of the .bin beside it (4 * byte 0), the rest is the .idx file. Any
// input must give a dataset whose every sequence can be read, or a tessera::Error; a crash, a
// sanitizer report or another exception is a bug. Built and run by scripts/fuzz.sh.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/check.h"
#include "data/indexed_dataset.h"

namespace {

bool write(const std::string& path, const uint8_t* data, size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  std::fwrite(data, 1, size, f);
  return std::fclose(f) == 0;
}

// An invariant broken on an accepted dataset: report it as a crash, with the input saved.
void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "indexed_dataset_fuzzer: invariant broken: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::data;
  if (size == 0) return 0;
  // The reader maps files, so each input goes through two, in memory when /dev/shm exists.
  static const std::string prefix = std::string(::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") +
                                    "/tessera_idx_fuzz_" + std::to_string(::getpid());
  static uint8_t bin[4 * 255];
  for (size_t i = 0; i < sizeof bin; ++i) bin[i] = static_cast<uint8_t>(i * 7 + 1);
  if (!write(bin_path(prefix), bin, 4 * size_t{data[0]}) || !write(idx_path(prefix), data + 1, size - 1)) return 0;
  try {
    IndexedDataset d(prefix);
    int64_t tokens = 0;
    for (int64_t s = 0; s < d.num_sequences(); ++s) {
      std::vector<int32_t> all = d.get(s);
      require(static_cast<int64_t>(all.size()) == d.sequence_length(s), "get(s) has sequence_length(s) tokens");
      tokens += static_cast<int64_t>(all.size());
      if (all.size() >= 2) {  // a part read on its own is the same part of the whole
        std::vector<int32_t> tail = d.get(s, 1, static_cast<int64_t>(all.size()) - 1);
        require(std::equal(tail.begin(), tail.end(), all.begin() + 1), "get(s, 1, n - 1) is the tail of get(s)");
      }
    }
    require(tokens == d.num_tokens(), "num_tokens() is the sum of the sequence lengths");
    std::vector<int64_t> docs = d.document_indices();
    require(static_cast<int64_t>(docs.size()) == d.num_documents() + 1, "document_indices() has documents + 1 entries");
    require(docs.front() == 0 && docs.back() == d.num_sequences(), "document indices run from 0 to the sequences");
    // Reads out of range must be refused, not performed.
    try {
      (void)d.get(d.num_sequences());
      require(false, "get(num_sequences()) throws");
    } catch (const tessera::Error&) {
    }
  } catch (const tessera::Error&) {
  }
  return 0;
}
