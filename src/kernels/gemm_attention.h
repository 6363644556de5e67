// Attention as strided-batched GEMMs plus row-wise softmax kernels (the classic Megatron / llm.c
// scheme, GPU step 2): written once here against a small device interface (RowOps), implemented by the
// CPU (kernels/cpu/gemm_attention_rows.h, loops and the CPU GEMM backend, what CI tests) and by CUDA
// (kernels/cuda/attention_gemm.h: cuBLASLt bf16 tensor-core GEMMs and one warp per score row).
//
// The sequence-major layout is a strided batch as it stands: q [seq, batch, heads, d] holds the
// [seq, d] matrix of (b, h) at q + (b * heads + h) * d with row stride batch * heads * d, so QK^T and PV
// are one strided-batched GEMM each over (b, kv head), no permute. GQA: one launch per member of a
// group (query head h = kvh * group + member), dK and dV accumulating over the members (beta = 1).
//
// Forward, per launch: S = scale Q K^T; the row kernel masks S (causal, document, padding), takes each
// row's log-sum-exp and writes P o Z in place (P = exp(S - lse), Z the Philox dropout factor keyed as
// the CPU keys it, 0 where masked); O = (P o Z) V.
// Backward: S = scale Q K^T again and dP = dO V^T; the row kernel forms D_i = sum_j P_ij Z_ij dP_ij
// (= dO_i . O_i), writes dS = scale P o (dP o Z - D) over S and P o Z over dP; then dV += (P o Z)^T dO,
// dQ = dS K, dK += dS^T Q.
//
// Recomputation policy: the scores are dropped after forward (only lse is saved, as the step-1 kernels
// and kernels/attention.h's entry points do), and backward recomputes them with one more GEMM. Keeping
// them would save that GEMM (a sixth of the attention's FLOPs) at batch * heads * seq * kv_seq values
// per layer held until backward, and would change the entry points' saved tensors; left for later.
// The scores of one launch are scratch, [samples, kv_heads, seq, kv_seq] fp32: the samples are taken in
// chunks so that they stay under GemmAttentionOptions::max_scores_bytes (backward needs two buffers).
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "kernels/gemm_attention_rows.h"

namespace tessera::kernels::gemm_attention {

// What a device provides. The buffers are the device's; every call is ordered after the previous ones
// (the CPU runs them in turn, CUDA on one stream).
class RowOps {
 public:
  virtual ~RowOps() = default;
  virtual Device device() const = 0;
  // One strided-batched GEMM (GemmArgs::batch > 1 with the strides set). The output matrices of a batch
  // may interleave (dQ's of consecutive heads share rows), never overlap.
  virtual void batched_gemm(const GemmArgs& g) = 0;
  // scores [rows.rows(), kv_seq] of scaled scores -> P o Z in place (0 where masked), lse[row.lse].
  virtual void softmax_forward(const ScoreRows& rows, float* scores, float* lse) = 0;
  // scores (the scaled scores) -> dS, dp (dO V^T) -> P o Z, both in place, from lse.
  virtual void softmax_backward(const ScoreRows& rows, float* scores, float* dp, const float* lse) = 0;
  // Scratch for `floats` values, and its release once the calls that use it are ordered.
  virtual float* allocate(int64_t floats) = 0;
  virtual void deallocate(float* p, int64_t floats) = 0;
};

struct GemmAttentionOptions {
  // The GEMMs' input precision (GemmArgs::input_type): F32 for exact fp32 products, BF16 for tensor-core
  // products of the inputs rounded to bf16 (fp32 accumulation; the scores and P stay fp32 buffers).
  DType gemm_input = DType::F32;
  // The most bytes the scores of one launch may take (backward's two buffers together): the samples are
  // processed in chunks that fit, one sample at least.
  int64_t max_scores_bytes = int64_t{512} << 20;
};

// As kernels::cpu::attention_forward / attention_backward (kernels/attention.h, every option of
// AttentionShape and AttentionDropout), on `ops`'s device. The masks (shape.doc_start, shape.key_valid)
// are the device's pointers and must already be checked (the CUDA entry checks them as the step-1
// kernels do); the shapes are checked here. seq must be positive (callers take empty problems elsewhere).
void forward(RowOps& ops, const float* q, const float* k, const float* v, float* out, float* lse,
             const AttentionShape& shape, float softmax_scale, const AttentionDropout& dropout,
             const GemmAttentionOptions& options = {});
// dq, dk, dv are overwritten. Deterministic where the device's GEMMs are.
void backward(RowOps& ops, const float* q, const float* k, const float* v, const float* lse, const float* dout,
              float* dq, float* dk, float* dv, const AttentionShape& shape, float softmax_scale,
              const AttentionDropout& dropout, const GemmAttentionOptions& options = {});

}  // namespace tessera::kernels::gemm_attention
