// The blocks of a paged key/value pool, with prefix caching (as vLLM's automatic prefix caching and
// Megatron-Core's dynamic engine): a full block is known by the hash of its whole token prefix (its
// parent block's hash and its own tokens), so a new sequence whose prompt starts with blocks another
// sequence already filled maps those blocks into its table and prefills only the rest.
//
// Blocks are reference-counted. A block no sequence uses goes back to the free blocks, or, when it holds
// a cached prefix, stays cached (reusable) until a block is needed and none is free: then the least
// recently used such block is evicted. A sequence's blocks are released last block first, so a prefix's
// later blocks are evicted before its earlier ones (a later block is useless without its parents).
//
// Every decision depends only on the calls made (no clock, no address, no randomized hash), so the ranks
// of a model group, making the same calls in the same order, hold the same blocks.
#pragma once

#include <cstdint>
#include <list>
#include <set>
#include <span>
#include <unordered_map>
#include <vector>

namespace tessera::infer {

class PrefixCache {
 public:
  // `enabled` false: a plain allocator (nothing is published, nothing shared).
  PrefixCache(int64_t blocks, int64_t block_size, bool enabled);

  int64_t blocks() const { return static_cast<int64_t>(entries_.size()); }
  int64_t block_size() const { return block_size_; }
  bool enabled() const { return enabled_; }
  // Blocks holding nothing; blocks holding a cached prefix that no sequence uses (evictable); both: what
  // a new sequence may take.
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t evictable_blocks() const { return static_cast<int64_t>(lru_.size()); }
  int64_t available_blocks() const { return free_blocks() + evictable_blocks(); }
  // Blocks holding a cached prefix, used or not.
  int64_t cached_blocks() const { return static_cast<int64_t>(by_hash_.size()); }
  // The sequences using `block`.
  int64_t references(int32_t block) const;

  // The hash of a full block of `tokens` after the prefix whose last block hashes to `parent` (kRootHash
  // for the first block): a 64-bit mix of every token, the same in every process.
  static constexpr uint64_t kRootHash = 0x9e3779b97f4a7c15ULL;
  static uint64_t hash_block(uint64_t parent, std::span<const int32_t> tokens);

  // The cached blocks that hold the first full blocks of `tokens`, at most `max_blocks` of them, in order;
  // each gets a reference (and leaves the eviction order). `hashes` gets their hashes. A cached block
  // is matched only when its tokens and its parent's hash are equal too (not its hash alone).
  std::vector<int32_t> acquire_prefix(std::span<const int32_t> tokens, int64_t max_blocks,
                                      std::vector<uint64_t>& hashes);
  // The number of blocks acquire_prefix would match now (no reference taken).
  int64_t cached_prefix_blocks(std::span<const int32_t> tokens, int64_t max_blocks) const;

  // `count` blocks for new keys and values, one reference each: free blocks lowest first, then the least
  // recently used cached blocks no sequence uses, which are forgotten. An Error when fewer are available.
  std::vector<int32_t> take(int64_t count);

  // Block `block` (which the caller uses) now holds the keys and values of `tokens` (a full block) after
  // the prefix whose last block hashes to `parent`, and will not be written again: later sequences may
  // share it. Returns its hash (the parent of the next block). When another block already holds that
  // prefix, or caching is off, this one stays private (freed, not cached, when released).
  uint64_t publish(int32_t block, uint64_t parent, std::span<const int32_t> tokens);

  // Drops one reference to each of a sequence's blocks (given in the sequence's order; released from its
  // last block back). An Error for a block that has none.
  void release(const std::vector<int32_t>& blocks);

 private:
  struct Entry {
    int64_t references = 0;
    bool cached = false;  // publish()ed and not evicted since
    uint64_t hash = 0, parent = 0;
    std::vector<int32_t> tokens;
    std::list<int32_t>::iterator in_lru;  // valid when cached and unreferenced
  };
  // The cached block holding this prefix's next block, or -1.
  int32_t find(uint64_t parent, std::span<const int32_t> tokens, uint64_t& hash) const;

  int64_t block_size_;
  bool enabled_;
  std::vector<Entry> entries_;
  std::set<int32_t> free_;
  std::list<int32_t> lru_;  // cached blocks no sequence uses, least recently used first
  std::unordered_map<uint64_t, int32_t> by_hash_;
};

}  // namespace tessera::infer
