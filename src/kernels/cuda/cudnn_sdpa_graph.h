// cuDNN's fused flash attention as an operation graph of the backend API (cuDNN 9): the nodes of the
// forward and backward SDPA patterns that cuDNN's runtime-fusion engines recognise and run as one kernel,
// built over Tessera's sequence-major layout ([seq, batch, heads, head_dim]: a strided batch, no permute).
//
// Forward (causal):  S = Q K^T (fp32) * scale; S masked to -inf above the diagonal (GEN_INDEX rows and
//   columns, CMP_GE, BINARY_SELECT); m = max_j S; E = exp(S - m); l = sum_j E; Stats = m + log l (the
//   natural log-sum-exp, fp32, Tessera's lse); P = E / l (bf16); O = P V.
// Backward: D = sum_d dO * O (fp32, a workspace tensor of ours); S recomputed and masked as above;
//   P = exp(S - Stats); dV = P^T dO; dP = dO V^T; dS = P (dP - D) * scale; dK = dS^T Q; dQ = dS K through
//   an fp32 accumulator of ours (zeroed before each run), then cast to bf16.
// With GQA (kv_heads < heads) dK and dV are reduced over each group's query heads.
// Descriptors only: building and finalizing each node and the operation graph needs cuDNN but no GPU
// (kernels/cuda/cuda_cudnn_sdpa_test.cc checks that on the CPU); the engines, the plan and the run
// (kernels/cuda/cudnn_sdpa.cc) need a device.
#pragma once

#include <cstdint>
#include <deque>
#include <string>

#include "kernels/cuda/cudnn_backend.h"

namespace tessera::kernels::cuda::cudnn {

struct SdpaDims {
  int64_t batch = 0, heads = 0, kv_heads = 0, seq = 0, kv_seq = 0, head_dim = 0;
  bool causal = true;
};

// The unique ids of the tensors a run binds (the variant pack's): bf16 Q, K, V, O, dO, dQ, dK, dV in
// Tessera's layout; fp32 Stats [batch, heads, seq]; the by-value scale, -inf and 1; the backward's two fp32
// workspace tensors.
enum SdpaUid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kScale, kNegativeInfinity, kOne, kDO, kDQ, kDK, kDV, kSoftmaxSum, kDQAccumulator
};

struct SdpaGraph {
  // Deques: a node holds references to the descriptors made before it, which must not move.
  std::deque<Descriptor> tensors;  // with the pointwise, matmul and reduction types the nodes name
  std::deque<Descriptor> operations;
};

// The finalized nodes of the forward (O and Stats from Q, K, V) and backward (dQ, dK, dV from Q, K, V, O,
// dO, Stats) graphs. An Error naming the node and attribute where cuDNN refuses one.
SdpaGraph build_sdpa_forward(const SdpaDims& dims);
SdpaGraph build_sdpa_backward(const SdpaDims& dims);

// The finalized operation graph of `graph`'s nodes (`name` in errors), on `handle` where one is given:
// cuDNN 9.19 finalizes it without a handle, so without a GPU (the CPU test does; earlier 9.x may need one).
Descriptor operation_graph(const SdpaGraph& graph, const std::string& name, cudnnHandle_t handle);

}  // namespace tessera::kernels::cuda::cudnn
