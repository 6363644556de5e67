// The data-parallel part of the time model counts as hidden only what really is: a bucket's reduction
// is hidden by the backward left after the bucket is ready, the last bucket (the embedding's, final
// only when backward ends) is always exposed, and the parameter all-gather is hidden only until the
// next forward reaches each bucket.
#include "plan/time_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "plan/memory_model.h"

namespace tessera::plan {
namespace {

TEST(ExposedAfterCompute, HidesOnlyWhatFitsAfterEachIsReady) {
  EXPECT_DOUBLE_EQ(exposed_after_compute({}, 10), 0);
  EXPECT_DOUBLE_EQ(exposed_after_compute({{0, 3}, {2, 4}}, 10), 0);  // done at 7
  EXPECT_DOUBLE_EQ(exposed_after_compute({{8, 5}}, 10), 3);           // only 2 s of compute left
  EXPECT_DOUBLE_EQ(exposed_after_compute({{0, 6}, {1, 6}}, 10), 2);   // the second waits for the first
  EXPECT_DOUBLE_EQ(exposed_after_compute({{10, 1}, {10, 2}}, 10), 3); // ready at the end: all exposed
}

// GPT-2 124M (tied embedding first in the buffer) on one stage.
model::ModelConfig gpt2_small() {
  model::ModelConfig c;
  c.num_layers = 12;
  c.hidden_size = 768;
  c.num_attention_heads = 12;
  c.num_query_groups = 12;
  c.kv_channels = 64;
  c.ffn_hidden_size = 3072;
  c.seq_length = 1024;
  c.max_position_embeddings = 1024;
  c.vocab_size = 50257;
  c.padded_vocab_size = 50304;
  return c;
}

Layout data_parallel(int dp, bool distributed_optimizer) {
  Layout l;
  l.dp = dp;
  l.micro_batch_size = 1;
  l.global_batch_size = dp;
  l.precision = Precision::Fp32;
  l.distributed_optimizer = distributed_optimizer;
  l.ddp_bucket_size = 10000000;
  return l;
}

// The reductions of the buckets that hold embedding rows: cut from the end like the trainer's.
double embedding_buckets_seconds(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d) {
  const double total = stage_parameters(c, l, 0).total();
  const double embedding = static_cast<double>(c.padded_vocab_size + c.max_position_embeddings) * c.hidden_size;
  double seconds = 0;
  for (double end = total; end > 0; end -= static_cast<double>(l.ddp_bucket_size)) {
    const double begin = std::max(0.0, end - static_cast<double>(l.ddp_bucket_size));
    if (begin < embedding) seconds += l.distributed_optimizer ? reduce_scatter_seconds(d, (end - begin) * 4, l.dp, 1)
                                                             : all_reduce_seconds(d, (end - begin) * 4, l.dp, 1);
  }
  return seconds;
}

TEST(DataParallelSeconds, OverlapHidesOnlyTheBucketsReadyBeforeBackwardEnds) {
  const model::ModelConfig c = gpt2_small();
  for (const char* device : {"A100-80GB", "cpu"}) {
    SCOPED_TRACE(device);
    const DeviceSpec d = find_device(device);
    Layout l = data_parallel(8, false);
    const double exposed = data_parallel_seconds(c, l, d, 0);
    l.overlap_grad_reduce = true;
    const double overlapped = data_parallel_seconds(c, l, d, 0);
    EXPECT_LT(overlapped, exposed);
    // The embedding's buckets are final only when backward ends: never hidden.
    EXPECT_GE(overlapped, embedding_buckets_seconds(c, l, d) * (1 - 1e-12));
    // One bucket for the whole buffer holds the embedding: nothing is hidden.
    l.ddp_bucket_size = 1'000'000'000;
    Layout plain = l;
    plain.overlap_grad_reduce = false;
    const double none_hidden = data_parallel_seconds(c, plain, d, 0);
    EXPECT_NEAR(data_parallel_seconds(c, l, d, 0), none_hidden, 1e-9 * none_hidden);
  }
}

TEST(DataParallelSeconds, UntiedHeadIsHiddenByTheLayersBackward) {
  // With an untied output layer at the end of the buffer, its own bucket is ready right after the head's
  // backward and the twelve layers' backward hides it on a fast network.
  model::ModelConfig c = gpt2_small();
  c.untie_embeddings_and_output_weights = true;
  const DeviceSpec d = find_device("A100-80GB");
  Layout l = data_parallel(8, false);
  l.overlap_grad_reduce = true;
  const double tied_rows = static_cast<double>(c.padded_vocab_size) * c.hidden_size;
  l.ddp_bucket_size = static_cast<int64_t>(tied_rows);  // the first bucket: about the output layer
  const double overlapped = data_parallel_seconds(c, l, d, 0);
  l.overlap_grad_reduce = false;
  const double plain = data_parallel_seconds(c, l, d, 0);
  EXPECT_LT(overlapped, plain);
  // What stays exposed is at least the buckets holding the embedding.
  EXPECT_GE(overlapped, embedding_buckets_seconds(c, l, d) * (1 - 1e-12));
}

TEST(DataParallelSeconds, ParamGatherIsExposedForTheFirstBucket) {
  const model::ModelConfig c = gpt2_small();
  const DeviceSpec d = find_device("A100-80GB");
  Layout l = data_parallel(8, true);
  l.overlap_grad_reduce = true;
  const double gather_waited = data_parallel_seconds(c, l, d, 0);
  l.overlap_param_gather = true;
  const double gather_overlapped = data_parallel_seconds(c, l, d, 0);
  EXPECT_LT(gather_overlapped, gather_waited);
  // The first forward op needs the embedding at once: the gathers up to its rows are exposed.
  const double total = stage_parameters(c, l, 0).total();
  const double first_bucket = total - std::floor((total - 1) / static_cast<double>(l.ddp_bucket_size)) *
                                          static_cast<double>(l.ddp_bucket_size);
  l.overlap_param_gather = false;
  l.overlap_grad_reduce = true;
  const double reduce_only = gather_waited - [&] {
    double all = 0;
    for (double end = total; end > 0; end -= static_cast<double>(l.ddp_bucket_size))
      all += all_gather_seconds(d, (end - std::max(0.0, end - static_cast<double>(l.ddp_bucket_size))) * 4, l.dp, 1);
    return all;
  }();
  EXPECT_GE(gather_overlapped - reduce_only, all_gather_seconds(d, first_bucket * 4, l.dp, 1) * (1 - 1e-9));
}

}  // namespace
}  // namespace tessera::plan

namespace tessera::plan {
namespace {

// GPT-2 small with `experts` experts of its MLP's width in every layer, top-2.
model::ModelConfig moe_gpt2(int64_t experts) {
  model::ModelConfig c = gpt2_small();
  c.moe.layer_experts.assign(12, experts);
  c.moe.ffn_hidden_size = 3072;
  c.moe.router.topk = 2;
  return c;
}

// Ring attention (issue 37): a rank computes 1 / cp of the sequence's attention in cp steps; each step's
// exchange of keys and values is hidden by the step's blocks when they take longer, else its excess is
// exposed (forward cp - 1 steps; backward the keys and values with the dK, dV sums, and the last sum's
// hop home, never hidden).
TEST(ContextParallelTime, RingExchangeIsExposedOnlyWhereItOutlastsTheBlocks) {
  model::ModelConfig c;
  c.num_layers = 4;
  c.hidden_size = 2048;
  c.num_attention_heads = c.num_query_groups = 16;
  c.kv_channels = 128;
  c.ffn_hidden_size = 8192;
  c.seq_length = c.max_position_embeddings = 32768;
  c.vocab_size = c.padded_vocab_size = 32768;
  DeviceSpec d = find_device("A100-80GB");
  d.kernel_seconds = 0;
  Layout l;
  l.flash_attention = true;
  l.cp = 4;
  const RingTimes ring = ring_attention_times(c, l, d);
  const AttentionTimes whole = core_attention_times(c, l, d, 32768, 32768);
  EXPECT_NEAR(l.cp * ring.step_forward, whole.forward / l.cp, 1e-12 * whole.forward);
  EXPECT_NEAR(l.cp * ring.step_backward, whole.backward / l.cp, 1e-12 * whole.backward);
  EXPECT_DOUBLE_EQ(ring.block_bytes, 8192.0 * 2 * 2048 * 2);  // K and V of seq / cp tokens, bf16
  EXPECT_GT(ring.step_forward, ring.exchange);                   // NVLink: the blocks hide the exchange
  EXPECT_EQ(ring.exposed_forward, 0);
  EXPECT_DOUBLE_EQ(ring.exposed_backward, ring.exchange);  // only the last dK, dV hop
  const LayerTimes t = layer_times(c, l, d, 1);
  EXPECT_DOUBLE_EQ(t.context_forward_comm, 0);
  EXPECT_DOUBLE_EQ(t.context_backward_comm, ring.exchange);
  // A link a thousand times slower: each step's exchange outlasts its blocks.
  d.intra_node_bandwidth /= 1000;
  const RingTimes slow = ring_attention_times(c, l, d);
  ASSERT_GT(slow.exchange, slow.step_forward);
  EXPECT_DOUBLE_EQ(slow.exposed_forward, 3 * (slow.exchange - slow.step_forward));
  EXPECT_DOUBLE_EQ(slow.exposed_backward, 2 * (slow.exchange - slow.step_backward) +
                                              2 * std::max(0.0, 2 * slow.exchange - slow.step_backward) +
                                              slow.exchange);
  EXPECT_DOUBLE_EQ(layer_times(c, l, d, 1).context_forward_comm, slow.exposed_forward);
  l.cp = 1;
  EXPECT_EQ(ring_attention_times(c, l, d).exposed_backward, 0);
  // Dense gradients are reduced over dp x cp: cp 2 x dp 1 reduces as dp 2 does.
  d = find_device("A100-80GB");
  Layout dp2;
  dp2.dp = 2;
  dp2.global_batch_size = 2;
  Layout cp2 = dp2;
  cp2.dp = 1;
  cp2.cp = 2;
  EXPECT_NEAR(data_parallel_seconds(c, cp2, d, 0), data_parallel_seconds(c, dp2, d, 0),
              1e-9 * data_parallel_seconds(c, dp2, d, 0));  // (less the backward they follow, rounded)
  EXPECT_GT(data_parallel_seconds(c, cp2, d, 0), 0);
}

TEST(ExpertParallel, AllToAllIsFreeAtEpOneAndGrowsWithEp) {
  const model::ModelConfig c = moe_gpt2(64);
  const DeviceSpec d = find_device("A100-80GB");  // 8 per node
  Layout l;
  l.etp = 1;
  const double rows_bytes = 1024 * 2 * 768 * 2.0;  // each rank's T * k routed rows of h, bf16
  double previous = 0;
  for (int ep : {1, 2, 4, 8, 16, 32}) {
    SCOPED_TRACE(str_cat("ep ", ep));
    l.ep = l.dp = ep;
    const LayerTimes t = layer_times(c, l, d, 1);
    // Dispatch and combine, in forward and again in backward.
    EXPECT_DOUBLE_EQ(t.expert_forward_comm + t.expert_backward_comm, 4 * all_to_all_seconds(d, rows_bytes, ep, 1));
    if (ep == 1) EXPECT_EQ(t.expert_forward_comm, 0);
    else EXPECT_GT(t.expert_forward_comm, previous);
    previous = t.expert_forward_comm;
  }
  // Inside a node each rank sends (n - 1) / n of its rows over NVLink; across nodes the share for the
  // other nodes' members leaves through its NIC.
  EXPECT_NEAR(all_to_all_seconds(d, 1e9, 8, 1), 7.0 / 8 * 1e9 / d.intra_node_bandwidth + 7 * d.intra_node_latency, 1e-12);
  EXPECT_NEAR(all_to_all_seconds(d, 1e9, 16, 1), 8.0 / 16 * 1e9 / d.inter_node_bandwidth + 15 * d.inter_node_latency,
              1e-12);
  // Under etp the rows are also all-gathered over etp before the experts and reduce-scattered after;
  // each rank then routes its sequence shard (T = s * b / tp).
  l.tp = 2;
  l.etp = 2;
  l.sequence_parallel = true;
  l.ep = 4;
  l.dp = 8;
  const double shard = rows_bytes / 2;
  EXPECT_DOUBLE_EQ(layer_times(c, l, d, 1).expert_forward_comm,
                   2 * all_to_all_seconds(d, shard, 4, 2) + all_gather_seconds(d, 2 * shard, 2, 1) +
                       reduce_scatter_seconds(d, 2 * shard, 2, 1));
  // Full recomputation runs forward's dispatch and combine again in backward.
  l.recompute = Recompute::Full;
  const LayerTimes full = layer_times(c, l, d, 1);
  EXPECT_DOUBLE_EQ(full.expert_backward_comm, 2 * full.expert_forward_comm);
}

TEST(ExpertParallel, ExpertComputeIsMegatronsMoeFlops) {
  // On a device whose GEMMs run at exactly 1 TFLOP/s and whose memory traffic is free, an MoE layer's
  // forward takes as long as a dense layer whose MLP is top-k times the expert width (the FLOPs that
  // Megatron's MoE formula counts for it), plus the router's GEMM, whatever tp, ep and etp.
  DeviceSpec d = find_device("A100-80GB");
  d.peak_flops = 1e12;
  d.gemm_efficiency = 1;
  d.memory_bandwidth = 1e30;
  const model::ModelConfig moe = moe_gpt2(8);
  model::ModelConfig dense = gpt2_small();
  dense.ffn_hidden_size = 2 * 3072;
  EXPECT_DOUBLE_EQ(model::model_flops_per_iteration(moe, 8), model::model_flops_per_iteration(dense, 8));
  for (int tp : {1, 2})
    for (int ep : {1, 2, 4})
      for (int etp : {1, tp}) {
        SCOPED_TRACE(str_cat("tp ", tp, " ep ", ep, " etp ", etp));
        Layout l;
        l.tp = tp;
        l.sequence_parallel = tp > 1;
        l.ep = ep;
        l.etp = etp;
        l.micro_batch_size = 2;
        const double tokens = 1024.0 * 2 / tp, router = 2 * tokens * 8 * 768 / 1e12;
        const double expected = layer_times(dense, l, d, 1).forward_compute + router;
        EXPECT_NEAR(layer_times(moe, l, d, 1).forward_compute, expected, 1e-9 * expected);
      }
}

TEST(FixedCosts, ShortGemmsPayWholeRowTilesAndEveryKernelItsFloor) {
  DeviceSpec d = find_device("A100-80GB");
  ASSERT_EQ(d.gemm_min_rows, 128);
  d.memory_bandwidth = 1e30;  // compute-bound however few the rows
  // Compute-bound shapes: 64 rows cost what 128 do, 256 rows twice that; a measured rate for the very
  // shape replaces both the rate and the tile rule.
  EXPECT_DOUBLE_EQ(gemm_seconds(d, 64, 8192, 8192, 2), gemm_seconds(d, 128, 8192, 8192, 2));
  EXPECT_NEAR(gemm_seconds(d, 256, 8192, 8192, 2), 2 * gemm_seconds(d, 128, 8192, 8192, 2), 1e-15);
  d.gemm_rates.push_back({64, 8192, 8192, 100e12});
  EXPECT_DOUBLE_EQ(gemm_seconds(d, 64, 8192, 8192, 2), 2.0 * 64 * 8192 * 8192 / 100e12);
  // Rates measured for this (n, k) at other rows: interpolated in m between the nearest two, the
  // largest's above them, and below the smallest its time.
  d.gemm_rates.push_back({1024, 8192, 8192, 200e12});
  EXPECT_DOUBLE_EQ(gemm_seconds(d, 544, 8192, 8192, 2), 2.0 * 544 * 8192 * 8192 / 150e12);
  EXPECT_DOUBLE_EQ(gemm_seconds(d, 4096, 8192, 8192, 2), 2.0 * 4096 * 8192 * 8192 / 200e12);
  EXPECT_DOUBLE_EQ(gemm_seconds(d, 16, 8192, 8192, 2), gemm_seconds(d, 64, 8192, 8192, 2));
  // Every kernel takes at least the device's floor: a tiny GEMM, and a layer of a tiny model whose
  // kernels are all below it (4 GEMMs, attention, 6 elementwise kernels forward).
  EXPECT_DOUBLE_EQ(gemm_seconds(d, 1, 8, 8, 2), 5e-6);
  model::ModelConfig tiny = gpt2_small();
  tiny.hidden_size = tiny.ffn_hidden_size = 8;
  tiny.num_attention_heads = tiny.num_query_groups = 1;
  tiny.kv_channels = 8;
  tiny.seq_length = 1;
  Layout l;
  l.flash_attention = true;
  EXPECT_DOUBLE_EQ(layer_times(tiny, l, d, 1).forward_compute, 11 * 5e-6);
}

}  // namespace
}  // namespace tessera::plan
