#include "infer/prefix_cache.h"

#include <algorithm>
#include <limits>

#include "core/check.h"

namespace tessera::infer {
namespace {

// splitmix64's finalizer: every input bit reaches every output bit.
uint64_t mix_prefix_hash(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace

PrefixCache::PrefixCache(int64_t blocks, int64_t block_size, bool enabled) : block_size_(block_size), enabled_(enabled) {
  TESSERA_CHECK(blocks > 0 && blocks <= std::numeric_limits<int32_t>::max() && block_size > 0,
                "a key/value pool of ", blocks, " blocks of ", block_size, " positions");
  entries_.resize(static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b) free_.insert(free_.end(), static_cast<int32_t>(b));
}

int64_t PrefixCache::references(int32_t block) const {
  TESSERA_CHECK(block >= 0 && block < blocks(), "key/value block ", block, " of ", blocks());
  return entries_[static_cast<size_t>(block)].references;
}

uint64_t PrefixCache::hash_block(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = mix_prefix_hash(parent ^ static_cast<uint64_t>(tokens.size()));
  for (int32_t t : tokens) h = mix_prefix_hash(h + static_cast<uint32_t>(t) + 0x9e3779b97f4a7c15ULL);
  return h;
}

int32_t PrefixCache::find(uint64_t parent, std::span<const int32_t> tokens, uint64_t& hash) const {
  hash = hash_block(parent, tokens);
  const auto found = by_hash_.find(hash);
  if (found == by_hash_.end()) return -1;
  const Entry& e = entries_[static_cast<size_t>(found->second)];
  // Equal hashes of different prefixes (a collision) must not share keys and values.
  if (e.parent != parent || !std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin(), tokens.end())) return -1;
  return found->second;
}

int64_t PrefixCache::cached_prefix_blocks(std::span<const int32_t> tokens, int64_t max_blocks) const {
  if (!enabled_) return 0;
  const int64_t full = std::min<int64_t>(max_blocks, static_cast<int64_t>(tokens.size()) / block_size_);
  uint64_t parent = kRootHash, hash = 0;
  int64_t n = 0;
  for (; n < full; ++n, parent = hash)
    if (find(parent, tokens.subspan(static_cast<size_t>(n * block_size_), static_cast<size_t>(block_size_)), hash) < 0)
      break;
  return n;
}

std::vector<int32_t> PrefixCache::acquire_prefix(std::span<const int32_t> tokens, int64_t max_blocks,
                                                 std::vector<uint64_t>& hashes) {
  std::vector<int32_t> out;
  hashes.clear();
  const int64_t n = cached_prefix_blocks(tokens, max_blocks);
  uint64_t parent = kRootHash;
  for (int64_t i = 0; i < n; ++i) {
    uint64_t hash = 0;
    const int32_t b =
        find(parent, tokens.subspan(static_cast<size_t>(i * block_size_), static_cast<size_t>(block_size_)), hash);
    Entry& e = entries_[static_cast<size_t>(b)];
    if (e.references++ == 0) lru_.erase(e.in_lru);
    out.push_back(b);
    hashes.push_back(hash);
    parent = hash;
  }
  return out;
}

std::vector<int32_t> PrefixCache::take(int64_t count) {
  TESSERA_CHECK(count >= 0 && count <= available_blocks(), "the key/value pool has ", available_blocks(), " of ",
                blocks(), " blocks free, ", count, " asked for");
  std::vector<int32_t> out;
  for (int64_t i = 0; i < count; ++i) {
    int32_t b;
    if (!free_.empty()) {
      b = *free_.begin();
      free_.erase(free_.begin());
    } else {  // evict the least recently used cached prefix block
      b = lru_.front();
      lru_.pop_front();
      Entry& e = entries_[static_cast<size_t>(b)];
      by_hash_.erase(e.hash);
      e.cached = false;
      e.tokens.clear();
    }
    entries_[static_cast<size_t>(b)].references = 1;
    out.push_back(b);
  }
  return out;
}

uint64_t PrefixCache::publish(int32_t block, uint64_t parent, std::span<const int32_t> tokens) {
  TESSERA_CHECK(static_cast<int64_t>(tokens.size()) == block_size_, "prefix cache: a block of ", tokens.size(),
                " tokens is not full (", block_size_, ")");
  TESSERA_CHECK(references(block) > 0, "prefix cache: block ", block, " published by no sequence using it");
  const uint64_t hash = hash_block(parent, tokens);
  Entry& e = entries_[static_cast<size_t>(block)];
  if (!enabled_ || e.cached || by_hash_.count(hash)) return hash;
  e.cached = true;
  e.hash = hash;
  e.parent = parent;
  e.tokens.assign(tokens.begin(), tokens.end());
  by_hash_.emplace(hash, block);
  return hash;
}

void PrefixCache::release(const std::vector<int32_t>& blocks) {
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    const int32_t b = *it;
    TESSERA_CHECK(b >= 0 && b < this->blocks() && entries_[static_cast<size_t>(b)].references > 0, "key/value block ",
                  b, " returned twice or not taken");
    Entry& e = entries_[static_cast<size_t>(b)];
    if (--e.references > 0) continue;
    if (e.cached) e.in_lru = lru_.insert(lru_.end(), b);
    else free_.insert(b);
  }
}

}  // namespace tessera::infer
