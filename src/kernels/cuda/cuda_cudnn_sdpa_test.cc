// cuDNN's fused attention (kernels/cuda/cudnn_sdpa.h, TESSERA_CUDA_ATTENTION=cudnn):
//   - on the CPU, where cuDNN loads (it needs no GPU to build descriptors): every node and the operation
//     graph of the forward and backward graphs finalize (kernels/cuda/cudnn_sdpa_graph.h), for MHA, GQA and
//     bidirectional attention; and what it refuses, by name;
//   - on a GPU: out, lse, dq, dk, dv against the CPU kernels on the same inputs rounded to bf16, within
//     bf16's rounding of P and dS (GPT-2's head sizes, a sequence that is no multiple of cuDNN's tiles,
//     GQA); dropout and a document mask refused through the tensor entry points.
// The GPU cases skip with CUDA's reason where no GPU is present, and with the loader's where cuDNN is not.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/tensor.h"
#include "core/testing.h"
#include "kernels/attention.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cudnn_sdpa.h"
#include "kernels/cuda/device_testing.h"
#include "kernels/cudnn_library.h"
#include "kernels/precision.h"
#include "kernels/tensor_ops.h"

#if __has_include(<cudnn_graph.h>)
#include "kernels/cuda/cudnn_sdpa_graph.h"
#define TESSERA_HAVE_CUDNN_GRAPH 1
#endif

namespace tessera::cuda {
namespace {

using namespace testing;
using kernels::AttentionDropout;
using kernels::AttentionShape;
using Kernels = kernels::cuda::AttentionKernels;
using ::tessera::testing::error_of;

// cuDNN's reason for not loading, or "" where it loads.
std::string cudnn_missing() {
  try {
    kernels::cudnn_library();
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

#ifdef TESSERA_HAVE_CUDNN_GRAPH
TEST(CudnnSdpaGraph, EveryNodeFinalizesWithoutAGpu) {
  if (std::string why = cudnn_missing(); !why.empty()) GTEST_SKIP() << why;
  namespace cg = kernels::cuda::cudnn;
  const cg::SdpaDims gpt2{.batch = 2, .heads = 12, .kv_heads = 12, .seq = 1024, .kv_seq = 1024, .head_dim = 64};
  // Causal forward: Q K^T, scale, two index generators, the comparison and the select, max, subtract,
  // exp, sum, log, add (Stats), divide (P), P V.
  EXPECT_EQ(cg::build_sdpa_forward(gpt2).operations.size(), 14u);
  // Backward: dO * O, its sum, D; Q K^T, scale, the mask's four; minus Stats, exp; P^T, P^T dO; dO V^T,
  // minus D, times P, times scale; dS^T, dS^T Q; K, dS K, the cast of dQ.
  EXPECT_EQ(cg::build_sdpa_backward(gpt2).operations.size(), 22u);
  // GQA adds the sums of dK and dV over each group; bidirectional leaves the mask out.
  const cg::SdpaDims gqa{.batch = 1, .heads = 8, .kv_heads = 2, .seq = 333, .kv_seq = 333, .head_dim = 128};
  EXPECT_EQ(cg::build_sdpa_forward(gqa).operations.size(), 14u);
  EXPECT_EQ(cg::build_sdpa_backward(gqa).operations.size(), 24u);
  cg::SdpaDims bidirectional = gpt2;
  bidirectional.causal = false;
  EXPECT_EQ(cg::build_sdpa_forward(bidirectional).operations.size(), 10u);
  EXPECT_EQ(cg::build_sdpa_backward(bidirectional).operations.size(), 18u);

  // The operation graphs too (no handle: cuDNN 9.19 needs none for them).
  for (const cg::SdpaDims& d : {gpt2, gqa, bidirectional}) {
    EXPECT_NO_THROW(cg::operation_graph(cg::build_sdpa_forward(d), "SDPA forward", nullptr));
    EXPECT_NO_THROW(cg::operation_graph(cg::build_sdpa_backward(d), "SDPA backward", nullptr));
  }

  cg::SdpaDims bad = gqa;
  bad.kv_heads = 3;
  EXPECT_NE(error_of([&] { cg::build_sdpa_forward(bad); }).find("heads a multiple of kv_heads"), std::string::npos);
}
#endif

TEST(CudnnSdpaRefusal, NamesWhatTheGraphCannotExpress) {
  const AttentionShape s{.seq = 64, .batch = 2, .heads = 4, .kv_heads = 2, .head_dim = 64};
  EXPECT_EQ(kernels::cuda::cudnn_attention_refusal(s, {}), "");
  AttentionDropout drop;
  drop.p = 0.1f;
  EXPECT_NE(kernels::cuda::cudnn_attention_refusal(s, drop).find("attention dropout 0.1 (--attention-dropout)"),
            std::string::npos);
  const int32_t mask[1] = {0};
  AttentionShape doc = s;
  doc.doc_start = mask;
  EXPECT_NE(kernels::cuda::cudnn_attention_refusal(doc, {}).find("document mask (--reset-attention-mask)"),
            std::string::npos);
  AttentionShape padded = s;
  padded.causal = false;
  padded.key_valid = mask;
  EXPECT_NE(kernels::cuda::cudnn_attention_refusal(padded, {}).find("padding mask"), std::string::npos);
  AttentionShape longer = s;
  longer.kv_seq = 96;
  EXPECT_NE(kernels::cuda::cudnn_attention_refusal(longer, {}).find("kv_seq 96 != seq 64"), std::string::npos);
  EXPECT_NE(kernels::cuda::cudnn_attention_refusal(longer, {}).find("token slices"), std::string::npos);
  AttentionShape odd = s;
  odd.head_dim = 20;
  EXPECT_NE(kernels::cuda::cudnn_attention_refusal(odd, {}).find("head_dim 20"), std::string::npos);
}

class CudaCudnnAttention : public CudaKernelTest {
 protected:
  void SetUp() override {
    CudaKernelTest::SetUp();
    if (IsSkipped()) return;
    if (std::string why = cudnn_missing(); !why.empty()) GTEST_SKIP() << why;
    kernels::cuda::set_attention_kernels(Kernels::kCudnn);
  }
  void TearDown() override {
    if (!IsSkipped()) kernels::cuda::set_attention_kernels(Kernels::kTiled);
  }
};

Tensor rounded_to_bf16(const Tensor& t) {
  Tensor r = Tensor::empty(t.shape());
  kernels::round_to(DType::BF16, t.f32(), r.f32(), t.numel());
  return r;
}

// Forward and backward through cuDNN (its own out and lse into backward) against the CPU kernels on the
// inputs rounded to bf16 (its out and lse into its backward): what remains is cuDNN's bf16 P, dS and
// outputs, against errors of order one from a wrong mask, scale or transpose.
void expect_matches_cpu(const AttentionShape& s, uint64_t seed) {
  SCOPED_TRACE("seq " + std::to_string(s.seq) + " heads " + std::to_string(s.heads) + "/" +
               std::to_string(s.kv_heads) + " d " + std::to_string(s.head_dim) + (s.causal ? " causal" : ""));
  const Shape q_shape{s.seq, s.batch, s.heads, s.head_dim}, kv_shape{s.seq, s.batch, s.kv_heads, s.head_dim};
  const Shape lse_shape{s.batch, s.heads, s.seq};
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  const Tensor q = random(q_shape, seed, -2.0f, 2.0f), k = random(kv_shape, seed + 1, -2.0f, 2.0f);
  const Tensor v = random(kv_shape, seed + 2), dout = random(q_shape, seed + 3);
  const Tensor qr = rounded_to_bf16(q), kr = rounded_to_bf16(k), vr = rounded_to_bf16(v), dr = rounded_to_bf16(dout);

  Tensor out = Tensor::empty(q_shape), lse = Tensor::empty(lse_shape);
  kernels::attention_forward(qr, kr, vr, out, lse, Tensor(), s, scale, {});
  Tensor dq = Tensor::empty(q_shape), dk = Tensor::empty(kv_shape), dv = Tensor::empty(kv_shape);
  kernels::attention_backward(qr, kr, vr, out, lse, dr, dq, dk, dv, Tensor(), s, scale, {});

  const Tensor qg = to_device(q), kg = to_device(k), vg = to_device(v), dg = to_device(dout);
  Tensor out_g = Tensor::empty(q_shape, DType::F32, kGpu), lse_g = Tensor::empty(lse_shape, DType::F32, kGpu);
  kernels::attention_forward(qg, kg, vg, out_g, lse_g, Tensor(), s, scale, {});
  Tensor dq_g = Tensor::empty(q_shape, DType::F32, kGpu), dk_g = Tensor::empty(kv_shape, DType::F32, kGpu);
  Tensor dv_g = Tensor::empty(kv_shape, DType::F32, kGpu);
  kernels::attention_backward(qg, kg, vg, out_g, lse_g, dg, dq_g, dk_g, dv_g, Tensor(), s, scale, {});

  EXPECT_TRUE(all_close(to_host(out_g), out, 1e-2f, 1e-2f)) << "out";
  EXPECT_TRUE(all_close(to_host(lse_g), lse, 1e-4f, 1e-3f)) << "lse";
  EXPECT_TRUE(all_close(to_host(dq_g), dq, 3e-2f, 3e-2f)) << "dq";
  EXPECT_TRUE(all_close(to_host(dk_g), dk, 3e-2f, 3e-2f)) << "dk";
  EXPECT_TRUE(all_close(to_host(dv_g), dv, 3e-2f, 3e-2f)) << "dv";
}

TEST_F(CudaCudnnAttention, CausalMatchesTheCpuWithinBf16) {
  expect_matches_cpu({.seq = 256, .batch = 2, .heads = 12, .kv_heads = 12, .head_dim = 64}, 11);
  expect_matches_cpu({.seq = 333, .batch = 2, .heads = 8, .kv_heads = 2, .head_dim = 128}, 12);
}

TEST_F(CudaCudnnAttention, BidirectionalMatchesTheCpuWithinBf16) {
  expect_matches_cpu({.seq = 100, .batch = 3, .heads = 4, .kv_heads = 4, .head_dim = 64, .causal = false}, 13);
}

// Through the tensor entry points: refused by name, before cuDNN runs.
TEST_F(CudaCudnnAttention, DropoutAndDocumentMasksAreRefused) {
  const AttentionShape s{.seq = 16, .batch = 1, .heads = 2, .kv_heads = 2, .head_dim = 64};
  const Tensor q = to_device(random({16, 1, 2, 64}, 1)), out = Tensor::empty({16, 1, 2, 64}, DType::F32, kGpu);
  const Tensor lse = Tensor::empty({1, 2, 16}, DType::F32, kGpu);
  AttentionDropout drop;
  drop.p = 0.1f;
  drop.total_heads = 2;
  EXPECT_NE(error_of([&] { kernels::attention_forward(q, q, q, out, lse, Tensor(), s, 0.125f, drop); })
                .find("TESSERA_CUDA_ATTENTION=cudnn: attention dropout 0.1"),
            std::string::npos);
  const Tensor doc = to_device(kernels::from_host(std::vector<int32_t>(16, 0)));
  EXPECT_NE(error_of([&] { kernels::attention_forward(q, q, q, out, lse, doc, s, 0.125f, {}); })
                .find("TESSERA_CUDA_ATTENTION=cudnn: a document mask"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera::cuda
