#include "kernels/cpu/decode_attention.h"

#include <gtest/gtest.h>

#include "core/check.h"
#include "core/testing.h"
#include "kernels/cpu/attention.h"

namespace tessera::kernels {
namespace {

// The CPU implementations over host buffers (kernels/cpu/), beside the tensor entry points.
using namespace cpu;

// Decoding a sequence in pieces against a growing cache gives the rows of full causal attention.
TEST(DecodeAttention, MatchesFullCausalAttentionPieceByPiece) {
  const int64_t seq = 37, heads = 4, kv_heads = 2, d = 16;
  auto q = testing::random_vector(seq * heads * d, 1), k = testing::random_vector(seq * kv_heads * d, 2),
       v = testing::random_vector(seq * kv_heads * d, 3);
  std::vector<float> full(q.size()), lse(heads * seq);
  const float scale = 0.25f;
  attention_forward(q.data(), k.data(), v.data(), full.data(), lse.data(), {seq, 1, heads, kv_heads, d}, scale, {});
  std::vector<float> pieces(q.size());
  int64_t past = 0;
  for (int64_t n : {5, 1, 1, 13, 17}) {  // a prompt, then single tokens, then longer pieces
    attention_decode(q.data() + past * heads * d, k.data(), v.data(), pieces.data() + past * heads * d, n, past,
                     heads, kv_heads, d, scale);
    past += n;
  }
  ASSERT_EQ(past, seq);
  EXPECT_LE(testing::max_scaled_error(pieces, full, 1e-6, 1e-5), 1.0);
}

TEST(DecodeAttention, RejectsHeadsThatDoNotGroup) {
  float x = 0;
  EXPECT_THROW(attention_decode(&x, &x, &x, &x, 1, 0, 3, 2, 1, 1.0f), tessera::Error);
}

}  // namespace
}  // namespace tessera::kernels
