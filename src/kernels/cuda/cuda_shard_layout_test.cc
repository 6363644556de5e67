// The CUDA shard placement (kernels/cuda/shard_layout.cu) through the tensor entry points, on tensors on
// cuda:0, against the CPU: parameter initialisation by each element's place in the full tensor (the
// same Philox draws; Box-Muller's double log and cos may round an ulp apart) and shards put back
// together (bit for bit), for whole tensors, rows, columns and the middle dimension of a 3-D view.
// Skipped, with CUDA's reason, where no GPU is present.
#include <gtest/gtest.h>

#include <cstdint>
#include <iterator>
#include <vector>

#include "core/tensor.h"
#include "kernels/cuda/device_testing.h"
#include "kernels/shard_layout.h"

namespace tessera::cuda {
namespace {

using namespace testing;
using CudaShardLayout = CudaKernelTest;

// Places of a shard of `shards` equal parts: view, dim; each test takes shard r at offset r * length.
struct Split {
  std::vector<int64_t> view;
  int dim;
};
const Split kSplits[] = {{{1031}, -1}, {{6, 35}, 0}, {{6, 35}, 1}, {{2, 12, 7}, 1}, {{3, 4, 130}, 2}};
constexpr int64_t kShards[] = {1, 2, 1, 3, 5};  // tiles each split's dimension (dim < 0: one shard)

int64_t numel(const std::vector<int64_t>& view) {
  int64_t n = 1;
  for (int64_t d : view) n *= d;
  return n;
}

TEST_F(CudaShardLayout, FillNormalMatchesTheCpu) {
  for (size_t s = 0; s < std::size(kSplits); ++s) {
    const Split& split = kSplits[s];
    const int64_t count = kShards[s], n = numel(split.view) / count;
    for (int64_t r = 0; r < count; ++r) {
      SCOPED_TRACE(::testing::Message() << "split " << s << " shard " << r);
      kernels::ShardPlace place{split.view, split.dim, 0, 0};
      if (split.dim >= 0) place.length = split.view[split.dim] / count, place.offset = r * place.length;
      Tensor out = Tensor::zeros({n}), out_gpu = to_device(out);
      kernels::fill_normal(out_gpu, 0.02f, 1234, 77, place);
      kernels::fill_normal(out, 0.02f, 1234, 77, place);
      EXPECT_TRUE(all_close(to_host(out_gpu), out, 2.5e-7f, 1e-12f));
    }
  }
}

TEST_F(CudaShardLayout, PlaceShardsMatchesTheCpu) {
  for (size_t s = 0; s < std::size(kSplits); ++s) {
    SCOPED_TRACE(::testing::Message() << "split " << s);
    const Split& split = kSplits[s];
    const int64_t count = kShards[s], total = numel(split.view);
    kernels::ShardPlace place{split.view, split.dim, 0, split.dim >= 0 ? split.view[split.dim] / count : 0};
    const Tensor shards = random({total}, 8);
    Tensor full = Tensor::zeros({total}), full_gpu = to_device(full);
    kernels::place_shards(to_device(shards), count, full_gpu, place);
    kernels::place_shards(shards, count, full, place);
    EXPECT_TRUE(same_bits(to_host(full_gpu), full));
  }
}

}  // namespace
}  // namespace tessera::cuda
