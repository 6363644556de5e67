// The score rows of the batched-GEMM attention (kernels/gemm_attention.h): which keys each row sees and
// which Philox element each probability's dropout draws, as host-and-device functions, so that the CPU
// loops (kernels/cpu/gemm_attention_rows.cc) and the CUDA row kernels (kernels/cuda/attention_gemm.cu)
// mask and drop exactly the elements the tiled CPU kernel does (kernels/cpu/attention.cc).
#pragma once

#include <cstdint>

#include "core/host_device.h"
#include "kernels/attention.h"
#include "kernels/math/dropout.h"

namespace tessera::kernels::gemm_attention {

// One GEMM launch's worth of score rows: the samples [first_sample, first_sample + samples) of the call,
// and of each kv head the query head `member` of its group (h = kvh * group + member). The scores are
// [samples, kv_heads, seq, kv_seq], row r = (sample - first_sample) * kv_heads * seq + kvh * seq + i:
// the GEMMs' batch t = (sample - first_sample) * kv_heads + kvh, matrix t at t * seq * kv_seq. Passed by
// value to device kernels; the mask pointers are the device's (the whole call's [batch, seq]).
struct ScoreRows {
  int64_t seq = 0, kv_seq = 0, offset = 0;  // queries, keys, query 0's position among the keys
  int64_t batch = 0, heads = 0, kv_heads = 0, group = 0;
  int64_t first_sample = 0, samples = 0, member = 0;
  bool causal = true;
  const int32_t* doc = nullptr;        // causal doc_start, or bidirectional_doc_start's first keys
  const int32_t* key_valid = nullptr;  // bidirectional padding mask
  float scale = 1.0f;                  // softmax_scale: backward folds it into dS
  bool dropout = false;
  float p = 0.0f, keep_scale = 1.0f;
  int64_t mask_seq = 0;  // the sequence length dropout is keyed by (AttentionDropout::seq, else kv_seq)
  AttentionDropout drop;

  TESSERA_HOST_DEVICE int64_t rows() const { return samples * kv_heads * seq; }

  // Row r's sample, query head and position, and its log-sum-exp's index in lse [batch, heads, seq].
  struct Row {
    int64_t b, h, i, lse;
  };
  TESSERA_HOST_DEVICE Row row(int64_t r) const {
    const int64_t i = r % seq, t = r / seq;
    const int64_t b = first_sample + t / kv_heads, h = (t % kv_heads) * group + member;
    return {b, h, i, (b * heads + h) * seq + i};
  }
  // The keys [first_key, end_key) query i of sample b may see before the padding mask: causal, from its
  // document's start to its position offset + i; bidirectional, from its first key (doc; seq: none) on.
  TESSERA_HOST_DEVICE int64_t first_key(int64_t b, int64_t i) const { return doc != nullptr ? doc[b * seq + i] : 0; }
  TESSERA_HOST_DEVICE int64_t end_key(int64_t i) const { return causal ? offset + i + 1 : kv_seq; }
  // Whether key j of sample b survives the padding mask (always, causal or without one).
  TESSERA_HOST_DEVICE bool kept(int64_t b, int64_t j) const {
    return key_valid == nullptr || key_valid[b * seq + j] != 0;
  }
  // Probability (b, h, i, j)'s Philox element, keyed as kernels/cpu/attention.cc keys it (positions among
  // the keys plus AttentionDropout's offsets).
  TESSERA_HOST_DEVICE uint64_t dropout_element(int64_t b, int64_t h, int64_t i, int64_t j) const {
    return math::attention_dropout_row(drop, mask_seq, b, h, drop.query_offset + offset + i) +
           static_cast<uint64_t>(drop.key_offset + j);
  }
};

}  // namespace tessera::kernels::gemm_attention
