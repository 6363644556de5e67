// The batched-GEMM attention on CUDA (kernels/cuda/attention_gemm.h) against the step-1 tiled kernels on
// the same GPU at GPT-2's head sizes (head_dim 64 and 128, a sequence that is no multiple of any tile,
// GQA, a document mask, dropout on and off, a token slice's queries at an offset), with fp32 products
// (within fp32 rounding) and bf16 tensor-core products (within bf16's); its row ops against the CPU's
// through the shared orchestration (kernels/gemm_attention.h), scores taken in chunks; and the selection
// by TESSERA_CUDA_ATTENTION's values. Every option's case against the CPU is kernels/cuda/cuda_attention_test.cc's (its "gemm"
// instances). Skipped, with CUDA's reason, where no GPU is present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/attention.h"
#include "kernels/cpu/gemm_attention_rows.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_gemm.h"
#include "kernels/cuda/device_testing.h"
#include "kernels/gemm_attention.h"
#include "kernels/tensor_ops.h"

namespace tessera::cuda {
namespace {

using namespace testing;
using kernels::AttentionDropout;
using kernels::AttentionShape;
using Kernels = kernels::cuda::AttentionKernels;

class CudaAttentionGemm : public CudaKernelTest {
 protected:
  void TearDown() override {
    if (!IsSkipped()) kernels::cuda::set_attention_kernels(Kernels::kTiled);
  }
};

struct Problem {
  AttentionShape shape;
  AttentionDropout drop;
  Tensor q, k, v, dout, mask;  // on the GPU (mask undefined without one)
  Shape q_shape, kv_shape, lse_shape;
  float scale;
};

Problem problem(const AttentionShape& s, float p, uint64_t seed, const std::vector<int32_t>& doc = {}) {
  Problem pr{s, {}, {}, {}, {}, {}, {}, {s.seq, s.batch, s.heads, s.head_dim},
             {s.kv_seq > 0 ? s.kv_seq : s.seq, s.batch, s.kv_heads, s.head_dim}, {s.batch, s.heads, s.seq},
             1.0f / std::sqrt(static_cast<float>(s.head_dim))};
  pr.drop.p = p;
  pr.drop.seed = 99;
  pr.drop.stream = 5;
  pr.drop.total_heads = s.heads;
  pr.q = to_device(random(pr.q_shape, seed, -2.0f, 2.0f));
  pr.k = to_device(random(pr.kv_shape, seed + 1, -2.0f, 2.0f));
  pr.v = to_device(random(pr.kv_shape, seed + 2));
  pr.dout = to_device(random(pr.q_shape, seed + 3));
  if (!doc.empty()) pr.mask = to_device(kernels::from_host(doc));
  return pr;
}

// out, lse, dq, dk, dv on the host, from `kernels` (backward from its own forward).
std::vector<Tensor> run(const Problem& pr, Kernels kernels) {
  kernels::cuda::set_attention_kernels(kernels);
  Tensor out = Tensor::empty(pr.q_shape, DType::F32, kGpu), lse = Tensor::empty(pr.lse_shape, DType::F32, kGpu);
  kernels::attention_forward(pr.q, pr.k, pr.v, out, lse, pr.mask, pr.shape, pr.scale, pr.drop);
  Tensor dq = Tensor::empty(pr.q_shape, DType::F32, kGpu), dk = Tensor::empty(pr.kv_shape, DType::F32, kGpu);
  Tensor dv = Tensor::empty(pr.kv_shape, DType::F32, kGpu);
  kernels::attention_backward(pr.q, pr.k, pr.v, out, lse, pr.dout, dq, dk, dv, pr.mask, pr.shape, pr.scale, pr.drop);
  return {to_host(out), to_host(lse), to_host(dq), to_host(dk), to_host(dv)};
}

void expect_close(const std::vector<Tensor>& got, const std::vector<Tensor>& want, float rtol, float atol) {
  const char* names[] = {"out", "lse", "dq", "dk", "dv"};
  for (int t = 0; t < 5; ++t) EXPECT_TRUE(all_close(got[t], want[t], rtol, atol)) << names[t];
}

// doc_start of one sample of `seq` tokens whose documents start at `starts` (0 first).
std::vector<int32_t> doc_starts(int64_t seq, const std::vector<int32_t>& starts, int64_t samples) {
  std::vector<int32_t> m;
  for (int64_t b = 0; b < samples; ++b)
    for (int64_t i = 0; i < seq; ++i) {
      int32_t first = 0;
      for (int32_t x : starts)
        if (x <= i) first = x;
      m.push_back(first);
    }
  return m;
}

TEST_F(CudaAttentionGemm, Fp32ProductsMatchTheTiledKernels) {
  for (float p : {0.0f, 0.1f}) {
    SCOPED_TRACE(p);
    const Problem mha = problem({.seq = 1000, .batch = 2, .heads = 12, .kv_heads = 12, .head_dim = 64}, p, 11);
    expect_close(run(mha, Kernels::kBatchedGemm), run(mha, Kernels::kTiled), 2e-5f, 5e-5f);
    const Problem gqa = problem({.seq = 333, .batch = 2, .heads = 8, .kv_heads = 2, .head_dim = 128}, p, 12,
                                doc_starts(333, {0, 100, 101, 250}, 2));
    expect_close(run(gqa, Kernels::kBatchedGemm), run(gqa, Kernels::kTiled), 2e-5f, 5e-5f);
  }
}

// bf16 products: within bf16's rounding of the fp32 kernels (as the CPU's bf16 GEMM inputs are of the
// float64 reference, kernels/gemm_attention_test.cc), and not equal to them (the rounding happened).
TEST_F(CudaAttentionGemm, Bf16ProductsStayWithinBf16Rounding) {
  for (float p : {0.0f, 0.1f}) {
    SCOPED_TRACE(p);
    const Problem pr = problem({.seq = 1000, .batch = 2, .heads = 12, .kv_heads = 4, .head_dim = 64}, p, 21);
    const std::vector<Tensor> bf16 = run(pr, Kernels::kBatchedGemmBf16), tiled = run(pr, Kernels::kTiled);
    expect_close(bf16, tiled, 3e-2f, 3e-2f);
    EXPECT_FALSE(all_close(bf16[0], tiled[0], 1e-6f, 1e-6f)) << "out looks unrounded";
  }
}

// A token slice (model/token_slice_attention.h): the last 200 queries of a sequence of 1000 against all
// its keys, dropout keyed by the whole sequence; fp32 products as the tiled kernels, bf16 within bf16's
// rounding of them.
TEST_F(CudaAttentionGemm, ATokenSliceMatchesTheTiledKernels) {
  for (float p : {0.0f, 0.1f}) {
    SCOPED_TRACE(p);
    Problem pr = problem({.seq = 200, .batch = 2, .heads = 8, .kv_heads = 2, .head_dim = 64, .kv_seq = 1000}, p, 41);
    pr.drop.seq = 1000;
    const std::vector<Tensor> tiled = run(pr, Kernels::kTiled);
    expect_close(run(pr, Kernels::kBatchedGemm), tiled, 2e-5f, 5e-5f);
    expect_close(run(pr, Kernels::kBatchedGemmBf16), tiled, 3e-2f, 3e-2f);
  }
}

// The CUDA row ops and the CPU's through the same orchestration, two samples per launch of three.
TEST_F(CudaAttentionGemm, RowOpsMatchTheCpusInChunks) {
  AttentionShape s{.seq = 77, .batch = 3, .heads = 4, .kv_heads = 2, .head_dim = 64};
  const Problem pr = problem(s, 0.1f, 31);
  const Tensor q = to_host(pr.q), k = to_host(pr.k), v = to_host(pr.v), dout = to_host(pr.dout);
  const kernels::gemm_attention::GemmAttentionOptions chunks{.max_scores_bytes = 2 * 2 * 2 * 77 * 77 * 4};
  std::vector<Tensor> want, got;
  for (const Shape& shape : {pr.q_shape, pr.lse_shape, pr.q_shape, pr.kv_shape, pr.kv_shape}) {
    want.push_back(Tensor::empty(shape));
    got.push_back(Tensor::empty(shape, DType::F32, kGpu));
  }
  auto& cpu = kernels::cpu::gemm_attention_row_ops();
  kernels::gemm_attention::forward(cpu, q.f32(), k.f32(), v.f32(), want[0].f32(), want[1].f32(), s, pr.scale, pr.drop,
                                   chunks);
  kernels::gemm_attention::backward(cpu, q.f32(), k.f32(), v.f32(), want[1].f32(), dout.f32(), want[2].f32(),
                                    want[3].f32(), want[4].f32(), s, pr.scale, pr.drop, chunks);
  auto& gpu = kernels::cuda::gemm_attention_row_ops(0);
  kernels::gemm_attention::forward(gpu, pr.q.f32(), pr.k.f32(), pr.v.f32(), got[0].f32(), got[1].f32(), s, pr.scale,
                                   pr.drop, chunks);
  kernels::gemm_attention::backward(gpu, pr.q.f32(), pr.k.f32(), pr.v.f32(), got[1].f32(), pr.dout.f32(),
                                    got[2].f32(), got[3].f32(), got[4].f32(), s, pr.scale, pr.drop, chunks);
  std::vector<Tensor> host;
  for (const Tensor& t : got) host.push_back(to_host(t));
  expect_close(host, want, 2e-5f, 5e-5f);
}

TEST_F(CudaAttentionGemm, SelectionNamesTheKernels) {
  for (Kernels k : {Kernels::kBatchedGemm, Kernels::kBatchedGemmBf16, Kernels::kRowPerWarp, Kernels::kTiled}) {
    kernels::cuda::set_attention_kernels(k);
    EXPECT_EQ(kernels::cuda::attention_kernels(), k);
  }
}

}  // namespace
}  // namespace tessera::cuda
