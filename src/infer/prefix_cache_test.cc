// The prefix cache's bookkeeping (infer/prefix_cache.h): hashes of whole prefixes, reference counts,
// least-recently-used eviction, the budget, and no block handed out while a sequence uses it.
#include "infer/prefix_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>

#include "core/check.h"

namespace tessera::infer {
namespace {

std::vector<int32_t> iota_tokens(int32_t first, int64_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

// A sequence as BatchDecoder holds one: its prefix read from the cache, fresh blocks for the rest, its
// full blocks published once written.
struct Held {
  std::vector<int32_t> blocks;
  std::vector<uint64_t> hashes;
};
Held hold(PrefixCache& cache, const std::vector<int32_t>& tokens, int64_t blocks_needed) {
  Held h;
  h.blocks = cache.acquire_prefix(tokens, (static_cast<int64_t>(tokens.size()) - 1) / cache.block_size(), h.hashes);
  const std::vector<int32_t> fresh = cache.take(blocks_needed - static_cast<int64_t>(h.blocks.size()));
  h.blocks.insert(h.blocks.end(), fresh.begin(), fresh.end());
  return h;
}
void publish_all(PrefixCache& cache, Held& h, const std::vector<int32_t>& tokens) {
  const int64_t size = cache.block_size();
  for (int64_t b = static_cast<int64_t>(h.hashes.size()); (b + 1) * size <= static_cast<int64_t>(tokens.size()); ++b)
    h.hashes.push_back(cache.publish(h.blocks[static_cast<size_t>(b)],
                                     b == 0 ? PrefixCache::kRootHash : h.hashes.back(),
                                     std::span<const int32_t>(tokens).subspan(static_cast<size_t>(b * size),
                                                                              static_cast<size_t>(size))));
}

TEST(PrefixCache, TheHashIsOfTheWholePrefix) {
  const std::vector<int32_t> a = {1, 2, 3, 4}, b = {1, 2, 3, 5};
  const uint64_t ha = PrefixCache::hash_block(PrefixCache::kRootHash, a);
  EXPECT_EQ(ha, PrefixCache::hash_block(PrefixCache::kRootHash, a));  // no per-process seed
  EXPECT_NE(ha, PrefixCache::hash_block(PrefixCache::kRootHash, b));
  // The same tokens after another prefix are another block.
  EXPECT_NE(PrefixCache::hash_block(ha, a), PrefixCache::hash_block(PrefixCache::hash_block(PrefixCache::kRootHash, b), a));
  // Order matters.
  EXPECT_NE(ha, PrefixCache::hash_block(PrefixCache::kRootHash, std::vector<int32_t>{2, 1, 3, 4}));
  // A golden value (splitmix64's finalizer over the length and tokens, computed apart in Python): every
  // rank and every build must compute the same hashes.
  EXPECT_EQ(ha, 0xf60b6a95852bb9d6ULL);
}

TEST(PrefixCache, ASecondSequenceSharesTheFullBlocksOfItsPrefix) {
  PrefixCache cache(10, 4, true);
  const std::vector<int32_t> context = iota_tokens(0, 10);  // 2 full blocks + 2 tokens
  Held first = hold(cache, context, 3);
  EXPECT_EQ(first.hashes.size(), 0u);  // nothing cached yet
  publish_all(cache, first, context);
  EXPECT_EQ(cache.cached_blocks(), 2);
  // The same context with another ending: its two full blocks are the first's, its third is fresh.
  std::vector<int32_t> other = context;
  other.push_back(77);
  Held second = hold(cache, other, 3);
  ASSERT_EQ(second.blocks.size(), 3u);
  EXPECT_EQ(second.blocks[0], first.blocks[0]);
  EXPECT_EQ(second.blocks[1], first.blocks[1]);
  EXPECT_NE(second.blocks[2], first.blocks[2]);
  EXPECT_EQ(cache.references(first.blocks[0]), 2);
  EXPECT_EQ(cache.references(first.blocks[2]), 1);
  // A prompt that differs in its first block shares nothing (even though its second block's tokens match).
  std::vector<int32_t> changed = context;
  changed[0] = 99;
  EXPECT_EQ(cache.cached_prefix_blocks(changed, 5), 0);
  // A prompt made only of cached blocks keeps its last block to prefill (the caller's cap), so a shared
  // block is never written.
  const std::vector<int32_t> exact(context.begin(), context.begin() + 8);
  EXPECT_EQ(cache.cached_prefix_blocks(exact, 8), 2);
  EXPECT_EQ(cache.cached_prefix_blocks(exact, (8 - 1) / 4), 1);
}

TEST(PrefixCache, UnusedCachedBlocksStayUntilTheBudgetNeedsThemLeastRecentlyUsedFirst) {
  PrefixCache cache(4, 2, true);
  const std::vector<int32_t> a = {1, 2, 3, 4}, b = {5, 6, 7, 8};
  Held ha = hold(cache, a, 2), hb = hold(cache, b, 2);
  publish_all(cache, ha, a);
  publish_all(cache, hb, b);
  EXPECT_EQ(cache.free_blocks(), 0);
  cache.release(ha.blocks);  // a first: the least recently used
  cache.release(hb.blocks);
  EXPECT_EQ(cache.free_blocks(), 0);
  EXPECT_EQ(cache.evictable_blocks(), 4);
  EXPECT_EQ(cache.available_blocks(), 4);
  // Still cached after release.
  EXPECT_EQ(cache.cached_prefix_blocks(std::vector<int32_t>{1, 2, 3, 4, 9}, 2), 2);
  // Taking one block evicts a's last block (a sequence's blocks go last block first), not its first.
  std::vector<int32_t> one = cache.take(1);
  EXPECT_EQ(one, std::vector<int32_t>{ha.blocks[1]});
  EXPECT_EQ(cache.cached_prefix_blocks(std::vector<int32_t>{1, 2, 3, 4, 9}, 2), 1);
  EXPECT_EQ(cache.cached_prefix_blocks(std::vector<int32_t>{5, 6, 7, 8, 9}, 2), 2);
  // Using b's prefix again makes it the most recently used: a's first block goes next.
  std::vector<uint64_t> hashes;
  std::vector<int32_t> reused = cache.acquire_prefix(std::vector<int32_t>{5, 6, 7, 8, 9}, 2, hashes);
  EXPECT_EQ(reused, hb.blocks);
  EXPECT_EQ(cache.available_blocks(), 1);
  EXPECT_EQ(cache.take(1), std::vector<int32_t>{ha.blocks[0]});
  EXPECT_EQ(cache.cached_blocks(), 2);
  // Nothing is left: the blocks in use are never handed out.
  EXPECT_EQ(cache.available_blocks(), 0);
  EXPECT_THROW(cache.take(1), Error);
  cache.release(reused);
  cache.release(one);
  EXPECT_EQ(cache.free_blocks(), 1);  // evicted blocks hold no prefix any more: freed, not cached
  EXPECT_EQ(cache.evictable_blocks(), 2);
}

TEST(PrefixCache, ReferencesAreCountedAndAPrivateDuplicateIsFreed) {
  PrefixCache cache(6, 2, true);
  const std::vector<int32_t> t = {3, 3, 4, 4};
  // Two sequences with the same prompt that start together: both fill their own blocks; the first to
  // publish is cached, the second's copy stays private.
  Held x = hold(cache, t, 2), y = hold(cache, t, 2);
  publish_all(cache, x, t);
  publish_all(cache, y, t);
  EXPECT_EQ(x.hashes, y.hashes);
  EXPECT_EQ(cache.cached_blocks(), 2);
  cache.release(y.blocks);
  EXPECT_EQ(cache.free_blocks(), 4);  // y's copies
  Held z = hold(cache, std::vector<int32_t>{3, 3, 4, 4, 5}, 3);
  EXPECT_EQ(z.blocks[0], x.blocks[0]);
  EXPECT_EQ(cache.references(x.blocks[0]), 2);
  cache.release(x.blocks);
  EXPECT_EQ(cache.references(x.blocks[0]), 1);
  EXPECT_EQ(cache.evictable_blocks(), 0);  // z still uses them
  cache.release(z.blocks);
  EXPECT_EQ(cache.evictable_blocks(), 2);
  EXPECT_EQ(cache.free_blocks(), 4);
  EXPECT_THROW(cache.release(z.blocks), Error);  // returned twice
  EXPECT_EQ(cache.available_blocks(), 6);
}

TEST(PrefixCache, OffIsAPlainAllocator) {
  PrefixCache cache(3, 2, false);
  const std::vector<int32_t> t = {1, 2, 3, 4, 5};
  Held h = hold(cache, t, 3);
  publish_all(cache, h, t);
  EXPECT_EQ(cache.cached_blocks(), 0);
  cache.release(h.blocks);
  EXPECT_EQ(cache.free_blocks(), 3);
  EXPECT_EQ(cache.cached_prefix_blocks(t, 2), 0);
  EXPECT_EQ(cache.take(3), (std::vector<int32_t>{0, 1, 2}));  // lowest first, as every rank
}

// Random sequences joining and leaving under a small budget: a block in use is never handed out again,
// the counts add up, and whatever is shared holds the tokens it is shared for.
TEST(PrefixCache, RandomTrafficNeverHandsOutABlockInUse) {
  const int64_t blocks = 24, size = 3;
  PrefixCache cache(blocks, size, true);
  std::vector<std::vector<int32_t>> content(blocks);  // the tokens each block holds, as the sequences wrote them
  struct Live {
    std::vector<int32_t> tokens;
    Held held;
  };
  std::vector<Live> live;
  std::mt19937_64 rng(11);
  for (int step = 0; step < 2000; ++step) {
    const uint64_t r = rng();
    if (!live.empty() && (r % 3 == 0 || cache.available_blocks() < 5)) {
      const size_t i = (r >> 8) % live.size();
      cache.release(live[i].held.blocks);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    // Prompts drawn from a few shared prefixes (the multiple-choice and system-prompt shapes).
    std::vector<int32_t> tokens = iota_tokens(static_cast<int32_t>(100 * ((r >> 4) % 3)), 2 + static_cast<int64_t>((r >> 12) % 8));
    tokens.push_back(static_cast<int32_t>((r >> 20) % 5));
    const int64_t needed = (static_cast<int64_t>(tokens.size()) + 2 + size - 1) / size;
    Held h = hold(cache, tokens, needed);
    std::set<int32_t> in_use;
    for (const Live& l : live) in_use.insert(l.held.blocks.begin(), l.held.blocks.end());
    for (size_t b = 0; b < h.blocks.size(); ++b) {
      const int32_t block = h.blocks[b];
      if (b < h.hashes.size()) {  // shared: it holds exactly this prefix's block
        const std::vector<int32_t> expected(tokens.begin() + static_cast<std::ptrdiff_t>(b * size),
                                            tokens.begin() + static_cast<std::ptrdiff_t>((b + 1) * size));
        ASSERT_EQ(content[static_cast<size_t>(block)], expected) << "step " << step;
      } else {
        ASSERT_FALSE(in_use.count(block)) << "block " << block << " handed out while in use, step " << step;
        content[static_cast<size_t>(block)].clear();
      }
    }
    for (int64_t b = static_cast<int64_t>(h.hashes.size()); (b + 1) * size <= static_cast<int64_t>(tokens.size()); ++b)
      content[static_cast<size_t>(h.blocks[static_cast<size_t>(b)])].assign(tokens.begin() + b * size,
                                                                              tokens.begin() + (b + 1) * size);
    publish_all(cache, h, tokens);
    live.push_back({tokens, h});
    int64_t used = 0;
    for (int32_t b = 0; b < blocks; ++b) used += cache.references(b) > 0 ? 1 : 0;
    ASSERT_EQ(used + cache.available_blocks(), blocks);
  }
}

}  // namespace
}  // namespace tessera::infer
