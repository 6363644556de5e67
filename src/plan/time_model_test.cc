// The data-parallel part of the time model counts as hidden only what really is: a bucket's reduction
// is hidden by the backward left after the bucket is ready, the last bucket (the embedding's, final
// only when backward ends) is always exposed, and the parameter all-gather is hidden only until the
// next forward reaches each bucket.
#include "plan/time_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

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
  const double total = static_cast<double>(stage_parameters(c, l, 0));
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
  const double total = static_cast<double>(stage_parameters(c, l, 0));
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
