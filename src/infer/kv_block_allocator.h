// The bookkeeping of a key/value pool's blocks: which are free, and which each sequence holds. A
// sequence takes every block its whole generation needs when it joins, so a running batch never runs
// out of cache in the middle of a step. Lowest free block first, so that the ranks of a model group,
// making the same calls, hand out the same blocks.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

namespace tessera::infer {

class KvBlockAllocator {
 public:
  KvBlockAllocator(int64_t blocks, int64_t block_size);

  int64_t blocks() const { return blocks_; }
  int64_t block_size() const { return block_size_; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  // Blocks of `block_size` positions for `positions` positions.
  static int64_t blocks_for(int64_t positions, int64_t block_size) { return (positions + block_size - 1) / block_size; }
  int64_t blocks_for(int64_t positions) const { return blocks_for(positions, block_size_); }

  // `count` free blocks (an Error when fewer are free), and their return.
  std::vector<int32_t> take(int64_t count);
  void give_back(const std::vector<int32_t>& blocks);

 private:
  int64_t blocks_, block_size_;
  std::set<int32_t> free_;
};

}  // namespace tessera::infer
