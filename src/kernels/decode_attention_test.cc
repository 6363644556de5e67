#include "kernels/cpu/decode_attention.h"

#include <gtest/gtest.h>

#include "core/check.h"
#include "core/testing.h"

#include <vector>
#include "kernels/cpu/attention.h"

namespace tessera::kernels {
namespace {

// The CPU implementations over host buffers (kernels/cpu/), beside the tensor entry points.
using namespace cpu;

// A contiguous cache is a pool of one block as long as the sequence.
std::vector<PagedRows> one_block(int64_t rows, int64_t past, const std::vector<int32_t>& block) {
  return {PagedRows{rows, past, block}};
}

// Decoding a sequence in pieces against a growing cache gives the rows of full causal attention.
TEST(DecodeAttention, MatchesFullCausalAttentionPieceByPiece) {
  const int64_t seq = 37, heads = 4, kv_heads = 2, d = 16;
  auto q = testing::random_vector(seq * heads * d, 1), k = testing::random_vector(seq * kv_heads * d, 2),
       v = testing::random_vector(seq * kv_heads * d, 3);
  std::vector<float> full(q.size()), lse(heads * seq);
  const float scale = 0.25f;
  attention_forward(q.data(), k.data(), v.data(), full.data(), lse.data(), {seq, 1, heads, kv_heads, d}, scale, {});
  std::vector<float> pieces(q.size());
  const std::vector<int32_t> block = {0};
  int64_t past = 0;
  for (int64_t n : {5, 1, 1, 13, 17}) {  // a prompt, then single tokens, then longer pieces
    attention_decode(q.data() + past * heads * d, k.data(), v.data(), pieces.data() + past * heads * d,
                     one_block(n, past, block), seq, heads, kv_heads, d, scale);
    past += n;
  }
  ASSERT_EQ(past, seq);
  EXPECT_LE(testing::max_scaled_error(pieces, full, 1e-6, 1e-5), 1.0);
}

// Several sequences of different lengths in one step, their caches in shuffled blocks of one pool: each
// sequence's rows equal its own full causal attention, whatever else is in the step.
TEST(DecodeAttention, BatchedSequencesInPagedBlocksMatchEachSequenceAlone) {
  const int64_t heads = 4, kv_heads = 2, d = 8, block_size = 3, pool_blocks = 20;
  const float scale = 0.3f;
  const std::vector<int64_t> lengths = {7, 1, 12, 4}, new_rows = {2, 1, 5, 4};  // rows = the last positions
  std::vector<std::vector<int32_t>> blocks = {{5, 0, 9}, {17}, {3, 11, 1, 8}, {2, 19}};
  std::vector<float> k_pool(pool_blocks * block_size * kv_heads * d), v_pool(k_pool.size());
  std::vector<float> q_all, expected, k_new, v_new;
  std::vector<PagedRows> step;
  for (size_t s = 0; s < lengths.size(); ++s) {
    const int64_t seq = lengths[s], n = new_rows[s], past = seq - n;
    auto q = testing::random_vector(seq * heads * d, 10 + s), k = testing::random_vector(seq * kv_heads * d, 20 + s),
         v = testing::random_vector(seq * kv_heads * d, 30 + s);
    std::vector<float> full(q.size()), lse(heads * seq);
    attention_forward(q.data(), k.data(), v.data(), full.data(), lse.data(), {seq, 1, heads, kv_heads, d}, scale, {});
    q_all.insert(q_all.end(), q.begin() + past * heads * d, q.end());
    expected.insert(expected.end(), full.begin() + past * heads * d, full.end());
    // The earlier positions are already cached; the step's own keys and values are written by write_kv_cache.
    write_kv_cache(k.data(), v.data(), k_pool.data(), v_pool.data(), std::vector<PagedRows>{{past, 0, blocks[s]}},
                   block_size, kv_heads, d);
    k_new.insert(k_new.end(), k.begin() + past * kv_heads * d, k.end());
    v_new.insert(v_new.end(), v.begin() + past * kv_heads * d, v.end());
    step.push_back({n, past, blocks[s]});
  }
  write_kv_cache(k_new.data(), v_new.data(), k_pool.data(), v_pool.data(), step, block_size, kv_heads, d);
  std::vector<float> out(q_all.size());
  attention_decode(q_all.data(), k_pool.data(), v_pool.data(), out.data(), step, block_size, heads, kv_heads, d, scale);
  EXPECT_LE(testing::max_scaled_error(out, expected, 1e-6, 1e-5), 1.0);
}

TEST(DecodeAttention, RejectsHeadsThatDoNotGroup) {
  float x = 0;
  const std::vector<int32_t> block = {0};
  EXPECT_THROW(attention_decode(&x, &x, &x, &x, one_block(1, 0, block), 1, 3, 2, 1, 1.0f), tessera::Error);
}

TEST(DecodeAttention, RejectsSequencesLongerThanTheirBlocks) {
  std::vector<float> x(64);
  const std::vector<int32_t> blocks = {0, 1};
  EXPECT_THROW(attention_decode(x.data(), x.data(), x.data(), x.data(), one_block(2, 3, blocks), 2, 1, 1, 1, 1.0f),
               tessera::Error);
}

}  // namespace
}  // namespace tessera::kernels
