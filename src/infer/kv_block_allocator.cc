#include "infer/kv_block_allocator.h"

#include <limits>

#include "core/check.h"

namespace tessera::infer {

KvBlockAllocator::KvBlockAllocator(int64_t blocks, int64_t block_size) : blocks_(blocks), block_size_(block_size) {
  TESSERA_CHECK(blocks > 0 && blocks <= std::numeric_limits<int32_t>::max() && block_size > 0,
                "a key/value pool of ", blocks, " blocks of ", block_size, " positions");
  for (int64_t b = 0; b < blocks; ++b) free_.insert(free_.end(), static_cast<int32_t>(b));
}

std::vector<int32_t> KvBlockAllocator::take(int64_t count) {
  TESSERA_CHECK(count >= 0 && count <= free_blocks(), "the key/value pool has ", free_blocks(), " of ", blocks_,
                " blocks free, ", count, " asked for");
  std::vector<int32_t> out;
  for (int64_t i = 0; i < count; ++i) out.push_back(*free_.begin()), free_.erase(free_.begin());
  return out;
}

void KvBlockAllocator::give_back(const std::vector<int32_t>& blocks) {
  for (int32_t b : blocks) {
    TESSERA_CHECK(b >= 0 && b < blocks_ && !free_.count(b), "key/value block ", b, " returned twice or not taken");
    free_.insert(b);
  }
}

}  // namespace tessera::infer
