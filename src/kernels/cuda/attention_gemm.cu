// The CUDA row ops of the batched-GEMM attention (kernels/cuda/attention_gemm.h).
//
// Each score row (one query of one head, kv_seq scores) belongs to one warp: lane t takes the keys
// t, t + 32, ... Forward keeps a running max and sum per lane over the row's visible keys (one read of
// the scores), merges them across the warp into the row's log-sum-exp, and writes P o Z over the whole
// row (0 where masked, so the PV GEMM may run over every key). Backward sums D = sum_j P Z dP across the
// warp in a fixed butterfly order, then writes dS and P o Z in place. The masks and the Philox elements
// are kernels/gemm_attention_rows.h's, which the CPU's row ops use too.
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>

#include "core/allocator.h"
#include "core/check.h"
#include "core/philox.h"
#include "kernels/cuda/attention_gemm.h"
#include "kernels/cuda/gemm_cublaslt.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/math/dropout.h"
#include "kernels/math/softmax.h"

namespace tessera::kernels::cuda {
namespace {

using gemm_attention::ScoreRows;

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarp = 32;

__device__ inline float factor(const ScoreRows& r, const PhiloxStream& rng, int64_t b, int64_t h, int64_t i,
                               int64_t j) {
  if (!r.dropout) return 1.0f;
  return math::dropout_keeps(rng.bits(r.dropout_element(b, h, i, j)), r.p) ? r.keep_scale : 0.0f;
}

__device__ inline bool visible(const ScoreRows& r, int64_t b, int64_t lo, int64_t hi, int64_t j) {
  return j >= lo && j < hi && r.kept(b, j);
}

__global__ void softmax_forward_kernel(ScoreRows r, float* scores, float* lse) {
  const int64_t n = grid_index() / kWarp;
  if (n >= r.rows()) return;  // the whole warp
  const int lane = static_cast<int>(threadIdx.x) & (kWarp - 1);
  const ScoreRows::Row w = r.row(n);
  float* s = scores + n * r.kv_seq;
  const int64_t lo = r.first_key(w.b, w.i), hi = r.end_key(w.i);
  math::SoftmaxStats st{-INFINITY, 0.0f};
  for (int64_t j = lo + lane; j < hi; j += kWarp)
    if (r.kept(w.b, j)) st = math::softmax_merge(st, {s[j], 1.0f});
  for (int o = kWarp / 2; o > 0; o >>= 1)
    st = math::softmax_merge(st, {__shfl_xor_sync(kFullMask, st.max, o), __shfl_xor_sync(kFullMask, st.sum, o)});
  // Lane 0's for all: merges in mirrored order can round apart (fused multiply-adds).
  st.max = __shfl_sync(kFullMask, st.max, 0);
  st.sum = __shfl_sync(kFullMask, st.sum, 0);
  // A row that sees no key (bidirectional_doc_start past every key): P = 0, lse -inf.
  const float row_lse = st.sum == 0.0f ? -INFINITY : math::softmax_lse(st.max, st.sum);
  if (lane == 0) lse[w.lse] = row_lse;
  const PhiloxStream rng(r.drop.seed, r.drop.stream);
  for (int64_t j = lane; j < r.kv_seq; j += kWarp)
    s[j] = visible(r, w.b, lo, hi, j) ? math::softmax_weight(s[j], row_lse) * factor(r, rng, w.b, w.h, w.i, j) : 0.0f;
}

__global__ void softmax_backward_kernel(ScoreRows r, float* scores, float* dp, const float* lse) {
  const int64_t n = grid_index() / kWarp;
  if (n >= r.rows()) return;  // the whole warp
  const int lane = static_cast<int>(threadIdx.x) & (kWarp - 1);
  const ScoreRows::Row w = r.row(n);
  float* s = scores + n * r.kv_seq;
  float* g = dp + n * r.kv_seq;
  const int64_t lo = r.first_key(w.b, w.i), hi = r.end_key(w.i);
  const float row_lse = lse[w.lse];
  const PhiloxStream rng(r.drop.seed, r.drop.stream);
  // D_i = sum_j P_ij Z_ij dP_ij (= dO_i . O_i): per lane, then across the warp.
  float D = 0.0f;
  for (int64_t j = lo + lane; j < hi; j += kWarp)
    if (r.kept(w.b, j)) D += math::softmax_weight(s[j], row_lse) * factor(r, rng, w.b, w.h, w.i, j) * g[j];
  for (int o = kWarp / 2; o > 0; o >>= 1) D += __shfl_xor_sync(kFullMask, D, o);
  D = __shfl_sync(kFullMask, D, 0);
  for (int64_t j = lane; j < r.kv_seq; j += kWarp) {
    if (!visible(r, w.b, lo, hi, j)) {
      s[j] = g[j] = 0.0f;
      continue;
    }
    const float prob = math::softmax_weight(s[j], row_lse), z = factor(r, rng, w.b, w.h, w.i, j);
    s[j] = r.scale * prob * (g[j] * z - D);
    g[j] = prob * z;
  }
}

unsigned blocks_for_rows(int64_t rows) {
  constexpr int64_t per_block = kThreads / kWarp;
  return static_cast<unsigned>((rows + per_block - 1) / per_block);
}

class CudaRowOps final : public gemm_attention::RowOps {
 public:
  explicit CudaRowOps(int device) : device_(device) {}
  Device device() const override { return Device{DeviceType::CUDA, device_}; }
  void batched_gemm(const GemmArgs& g) override { kernels::gemm(g); }
  void softmax_forward(const ScoreRows& r, float* scores, float* lse) override {
    softmax_forward_kernel<<<blocks_for_rows(r.rows()), kThreads, 0, launch_stream()>>>(r, scores, lse);
    check_launch("attention softmax forward (batched-GEMM attention)");
  }
  void softmax_backward(const ScoreRows& r, float* scores, float* dp, const float* lse) override {
    softmax_backward_kernel<<<blocks_for_rows(r.rows()), kThreads, 0, launch_stream()>>>(r, scores, dp, lse);
    check_launch("attention softmax backward (batched-GEMM attention)");
  }
  // From the device's caching allocator, stream-ordered: released once the launches that use it are queued.
  float* allocate(int64_t floats) override {
    return static_cast<float*>(allocator_for(device()).allocate(bytes(floats), 256));
  }
  void deallocate(float* p, int64_t floats) override { allocator_for(device()).deallocate(p, bytes(floats)); }

 private:
  static size_t bytes(int64_t floats) { return static_cast<size_t>(floats > 0 ? floats : 1) * sizeof(float); }
  int device_;
};

int current_device() {
  int device = 0;
  tessera::cuda::check(cudaGetDevice(&device), "cudaGetDevice (batched-GEMM attention)");
  return device;
}

}  // namespace

gemm_attention::RowOps& gemm_attention_row_ops(int device) {
  static const bool registered = (tessera::cuda::register_gemm_backend(), true);
  (void)registered;
  // One per device, made on first use and kept (they hold only the index).
  static CudaRowOps* ops[64] = {};
  TESSERA_CHECK(device >= 0 && device < 64, "batched-GEMM attention: CUDA device ", device, " out of range");
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (ops[device] == nullptr) ops[device] = new CudaRowOps(device);
  return *ops[device];
}

void attention_forward_gemm(const float* q, const float* k, const float* v, float* out, float* lse,
                            const AttentionShape& shape, float softmax_scale, const AttentionDropout& dropout,
                            DType gemm_input) {
  gemm_attention::forward(gemm_attention_row_ops(current_device()), q, k, v, out, lse, shape, softmax_scale, dropout,
                          {.gemm_input = gemm_input});
}

void attention_backward_gemm(const float* q, const float* k, const float* v, const float* lse, const float* dout,
                             float* dq, float* dk, float* dv, const AttentionShape& shape, float softmax_scale,
                             const AttentionDropout& dropout, DType gemm_input, int device) {
  gemm_attention::backward(gemm_attention_row_ops(device), q, k, v, lse, dout, dq, dk, dv, shape, softmax_scale,
                           dropout, {.gemm_input = gemm_input});
}

}  // namespace tessera::kernels::cuda
