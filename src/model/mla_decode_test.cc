// Generation with Multi-Latent Attention (issue 53, item 3): decoding through the cache of compressed
// rows (latent and RoPE key) gives the full forward's logits, alone and for two sequences in one step
// whose blocks interleave in the pool; the pool holds kv_lora_rank + qk_pos_emb_head_dim floats per
// position and layer, against 2 x groups x kv_channels for grouped-query attention.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "model/gpt_model.h"
#include "model/model_testing.h"

namespace tessera::model {
namespace {

// V2-Lite's form (linear_q_proj, no latent norms, plain RoPE) and V3's (compressed query, latent norms,
// YaRN with mscale, values narrower than the query/key heads).
ModelConfig mla_decode_config(bool v3) {
  ModelConfig c = testing::tiny_gpt_config(true, 2, 7, 8);
  c.num_query_groups = c.num_attention_heads;
  c.mla.enabled = true;
  c.mla.kv_lora_rank = 5;
  c.mla.qk_head_dim = 4;
  c.mla.qk_pos_emb_head_dim = 4;
  c.mla.v_head_dim = v3 ? 3 : 4;
  c.mla.yarn = v3;
  if (v3) {
    c.qk_layernorm = true;
    c.mla.q_lora_rank = 6;
    c.mla.rotary_scaling_factor = 4;
    c.mla.mscale = 0.9;
    c.mla.mscale_all_dim = 0.6;
    c.mla.original_max_position_embeddings = 4;  // the ramp divides some of the tiny head's frequencies
    c.rotary_base = 100;
  }
  return c;
}

void expect_logits(const Tensor& logits, int64_t row, const GptActivations& rec, int64_t position,
                   const ModelConfig& c, const std::string& what) {
  const float* got = logits.f32() + row * c.padded_vocab_size;
  const float* expected = rec.logits.f32() + position * c.padded_vocab_size;
  for (int64_t v = 0; v < c.padded_vocab_size; ++v)
    EXPECT_NEAR(got[v], expected[v], 1e-5f * (1 + std::abs(expected[v]))) << what << " position " << position
                                                                          << " id " << v;
}

TEST(MlaDecoding, TheLatentCacheGivesTheFullForwardsLogits) {
  for (bool v3 : {false, true}) {
    const std::string what = v3 ? "V3 form" : "V2-Lite form";
    const ModelConfig c = mla_decode_config(v3);
    ParameterSet params;
    GptModel model(c, params);
    params.allocate(5);
    const MicroBatch mb = testing::random_batch(c, 1, 13);
    GptActivations rec;
    model.forward(mb, testing::context(c, 1, false), rec);
    DecodeState state = model.start_decoding(c.seq_length);
    const std::vector<int32_t> tokens(mb.tokens.i32(), mb.tokens.i32() + c.seq_length);
    int64_t fed = 0;
    for (int64_t piece : {3, 1, 2, 1}) {  // a prompt, then one token at a time
      const std::vector<int32_t> next(tokens.begin() + fed, tokens.begin() + fed + piece);
      fed += piece;
      expect_logits(model.next_token_logits(next, state), 0, rec, fed - 1, c, what);
    }
  }
}

// Two sequences share a pool of blocks of 2 positions, their blocks interleaved, and are decoded in the
// same steps (different lengths): each gets its own full forward's logits.
TEST(MlaDecoding, SequencesInOneStepReadOnlyTheirOwnBlocks) {
  const ModelConfig c = mla_decode_config(true);
  ParameterSet params;
  GptModel model(c, params);
  params.allocate(6);
  const MicroBatch a = testing::random_batch(c, 1, 21), b = testing::random_batch(c, 1, 22);
  GptActivations rec_a, rec_b;
  model.forward(a, testing::context(c, 1, false), rec_a);
  model.forward(b, testing::context(c, 1, false), rec_b);
  KvPool pool = model.make_kv_pool(8, 2);
  DecodeStep sa{{}, 0, {6, 0, 4, 2}}, sb{{}, 0, {1, 7, 3, 5}};
  const auto take = [](const MicroBatch& mb, int64_t from, int64_t count) {
    return std::vector<int32_t>(mb.tokens.i32() + from, mb.tokens.i32() + from + count);
  };
  int64_t past_a = 0, past_b = 0;
  for (const auto& [na, nb] : std::vector<std::pair<int64_t, int64_t>>{{3, 1}, {1, 2}, {1, 1}, {2, 1}}) {
    sa.tokens = take(a, past_a, na), sa.past = past_a;
    sb.tokens = take(b, past_b, nb), sb.past = past_b;
    const Tensor logits = model.decode_step({sa, sb}, Tensor(), pool);
    past_a += na, past_b += nb;
    expect_logits(logits, 0, rec_a, past_a - 1, c, "sequence a");
    expect_logits(logits, 1, rec_b, past_b - 1, c, "sequence b");
  }
}

// The point: the cache per token is the latent and the RoPE key, not every head's key and value.
TEST(MlaDecoding, ThePoolHoldsTheCompressedRowPerPosition) {
  const ModelConfig mla = mla_decode_config(true);
  const ModelConfig gqa = testing::tiny_gpt_config(true, 2, 7, 8);  // 4 heads in 2 groups of 4 channels
  for (const ModelConfig* c : {&mla, &gqa}) {
    ParameterSet params;
    GptModel model(*c, params);
    params.allocate(7);
    const KvPool pool = model.make_kv_pool(3, 4);
    int64_t floats = 0;
    for (const KvCache& layer : pool.layers)
      for (const Tensor* t : {&layer.k, &layer.v})
        if (t->defined()) floats += t->numel();
    EXPECT_EQ(floats, c->kv_cache_floats_per_position() * 3 * 4);
  }
  EXPECT_EQ(mla.kv_cache_floats_per_position(), 2 * (5 + 4));      // 2 layers of (kv_lora_rank + rope dim)
  EXPECT_EQ(gqa.kv_cache_floats_per_position(), 2 * 2 * 2 * 4);    // 2 layers of k and v, 2 groups of 4
  // DeepSeek-V3's attention (61 layers, 128 heads of 128 + 64 query/key and 128 value dimensions):
  // (512 + 64) per layer against 2 x 128 x 128 for its heads as multi-head attention.
  ModelConfig v3;
  v3.num_layers = 61;
  v3.num_attention_heads = v3.num_query_groups = 128;
  v3.kv_channels = 128;
  EXPECT_EQ(v3.kv_cache_floats_per_position(), 61 * 2 * 128 * 128);
  v3.mla.enabled = true;
  v3.mla.kv_lora_rank = 512;
  v3.mla.qk_pos_emb_head_dim = 64;
  EXPECT_EQ(v3.kv_cache_floats_per_position(), 61 * 576);
}

}  // namespace
}  // namespace tessera::model
