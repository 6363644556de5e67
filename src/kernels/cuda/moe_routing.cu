// The MoE routing kernels on the GPU (kernels/cuda/moe_routing.h). One thread per token runs the CPU's
// row functions (kernels/math/moe_router_rows.h) on its own slice of a scratch buffer: a token's work is
// a few dozen experts, serial on both sides, so the results are the CPU's bit for bit (this file is
// compiled with -fmad=false and the CPU's with -ffp-contract=off: CMakeLists.txt). Speed (a warp per
// token, shared-memory scratch) is for a later step.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/philox.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/moe_routing.h"
#include "kernels/math/dropout.h"
#include "kernels/math/moe_router_rows.h"
#include "kernels/math/moe_routing.h"

namespace tessera::kernels::cuda {
namespace {

int64_t group_count(const TopkRouterOptions& opt) { return opt.grouped() ? opt.num_groups : 0; }
int64_t kept_groups(const TopkRouterOptions& opt) { return opt.grouped() ? opt.group_topk : 0; }

// Token t's slice of the scratch, laid out as router_float_scratch / router_int_scratch count it.
__global__ void router_forward_kernel(const float* logits, int64_t tokens, int64_t E, TopkRouterOptions opt,
                                      int64_t G, int64_t gk, const float* bias, int32_t* indices, float* probs,
                                      float* fscratch, int32_t* iscratch) {
  const int64_t k = opt.topk, fper = 2 * E + 2 * k + G + gk, iper = gk + k;
  for (int64_t t = grid_index(); t < tokens; t += grid_stride()) {
    float* f = fscratch + t * fper;
    int32_t* i = iscratch + t * iper;
    const math::RouterRowScratch s{f, f + E, f + 2 * E, f + 2 * E + k, f + 2 * E + k + G, f + 2 * E + k + G + gk,
                                   i, i + gk};
    math::router_forward_row(logits + t * E, E, opt, bias, s, indices + t * k, probs + t * k);
  }
}

__global__ void router_backward_kernel(const float* logits, const int32_t* indices, const float* dprobs,
                                       int64_t tokens, int64_t E, TopkRouterOptions opt, float* dlogits,
                                       float* fscratch) {
  const int64_t k = opt.topk, per = 2 * E + 2 * k;
  for (int64_t t = grid_index(); t < tokens; t += grid_stride()) {
    float* f = fscratch + t * per;
    math::router_backward_row(logits + t * E, indices + t * k, dprobs + t * k, E, opt, f, f + E, f + 2 * E,
                              f + 2 * E + k, dlogits + t * E);
  }
}

__global__ void aux_topk_kernel(const float* logits, int64_t tokens, int64_t E, int64_t k, RouterScoreFunction score,
                                float* fscratch, int32_t* top) {
  for (int64_t t = grid_index(); t < tokens; t += grid_stride()) {
    float* p = fscratch + t * (E + k);
    math::aux_scores_row(logits + t * E, E, score, p);
    math::topk_row(p, E, k, p + E, top + t * k);
  }
}

// Each routing entry adds 1 to its group's count of its expert: whole numbers below 2^24 in fp32, so
// the atomic adds are exact in any order.
__global__ void count_kernel(const int32_t* top, int64_t tokens, int64_t E, int64_t k, int64_t groups, float* counts) {
  for (int64_t s = grid_index(); s < tokens * k; s += grid_stride())
    atomicAdd(counts + ((s / k) % groups) * E + top[s], 1.0f);
}

__global__ void aux_terms_kernel(const float* logits, const float* counts, int64_t tokens, int64_t E, int64_t groups,
                                 RouterScoreFunction score, double* per_token, float* fscratch) {
  for (int64_t t = grid_index(); t < tokens; t += grid_stride())
    per_token[t] = math::aux_loss_token(logits + t * E, counts + (t % groups) * E, E, score, fscratch + t * E);
}

__global__ void aux_backward_kernel(const float* logits, const float* counts, int64_t tokens, int64_t E,
                                    int64_t groups, RouterScoreFunction score, float c, float* dlogits,
                                    float* fscratch) {
  for (int64_t t = grid_index(); t < tokens; t += grid_stride())
    math::aux_loss_backward_row(logits + t * E, counts + (t % groups) * E, E, score, c, fscratch + t * E,
                                dlogits + t * E);
}

__global__ void z_terms_kernel(const float* logits, int64_t tokens, int64_t E, double* per_token) {
  for (int64_t t = grid_index(); t < tokens; t += grid_stride()) {
    const double l = math::router_row_lse(logits + t * E, E);
    per_token[t] = l * l;
  }
}

// The host's ordered sum of the terms (kernels/moe_routing.cc sum_terms): the block stages a chunk of them
// in shared memory with coalesced loads, then one thread adds the chunk in order (a double add's latency
// per term, rather than a dependent global load's).
constexpr int kSumChunk = 2048;
__global__ void sum_terms_kernel(const double* terms, int64_t n, double* out) {
  __shared__ double chunk[kSumChunk];
  double sum = 0;
  for (int64_t begin = 0; begin < n; begin += kSumChunk) {
    const int64_t count = n - begin < kSumChunk ? n - begin : kSumChunk;
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) chunk[i] = terms[begin + i];
    __syncthreads();
    if (threadIdx.x == 0)
      for (int64_t i = 0; i < count; ++i) sum = __dadd_rn(sum, chunk[i]);
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = sum;
}

__global__ void z_backward_kernel(const float* logits, int64_t tokens, int64_t E, float c, float* dlogits) {
  for (int64_t t = grid_index(); t < tokens; t += grid_stride()) {
    const float* x = logits + t * E;
    const float lse = math::router_row_lse(x, E);
    for (int64_t i = 0; i < E; ++i) dlogits[t * E + i] += math::z_loss_dlogit(x[i], lse, c);
  }
}

__global__ void gather_kernel(const float* x, const int32_t* token, float* out, int64_t rows, int64_t hidden) {
  for (int64_t e = grid_index(); e < rows * hidden; e += grid_stride()) {
    const int64_t r = e / hidden, c = e % hidden;
    out[e] = x[static_cast<int64_t>(token[r]) * hidden + c];
  }
}

// The scatter's counting sort by token: counts (into begin[t + 1]), their prefix sums, each row's
// place (in any order among its token's rows), then each token's rows sorted ascending.
__global__ void token_count_kernel(const int32_t* token, int64_t rows, int32_t* begin) {
  for (int64_t r = grid_index(); r < rows; r += grid_stride()) atomicAdd(begin + token[r] + 1, 1);
}
// One block: each thread sums a chunk of the counts, thread 0 scans the chunks' sums, each thread then
// writes its chunk's prefix sums. Integer sums: exact in any order.
constexpr int kScanThreads = 1024;
__global__ void prefix_sum_kernel(int32_t* begin, int32_t* next, int64_t tokens) {
  __shared__ int32_t part[kScanThreads];
  const int64_t chunk = (tokens + blockDim.x - 1) / blockDim.x;
  const int64_t lo = threadIdx.x * chunk, hi = lo + chunk < tokens ? lo + chunk : tokens;
  int32_t s = 0;
  for (int64_t t = lo; t < hi; ++t) s += begin[t + 1];
  part[threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int i = 0, run = 0; i < static_cast<int>(blockDim.x); ++i) {
      const int32_t v = part[i];
      part[i] = run;
      run += v;
    }
  __syncthreads();
  int32_t run = part[threadIdx.x];
  for (int64_t t = lo; t < hi; ++t) {  // begin[t + 1] holds token t's count until here
    next[t] = run;
    run += begin[t + 1];
    begin[t + 1] = run;
  }
}
__global__ void place_rows_kernel(const int32_t* token, int64_t rows, int32_t* next, int32_t* order) {
  for (int64_t r = grid_index(); r < rows; r += grid_stride()) order[atomicAdd(next + token[r], 1)] = static_cast<int32_t>(r);
}
__global__ void sort_rows_kernel(const int32_t* begin, int64_t tokens, int32_t* order) {
  for (int64_t t = grid_index(); t < tokens; t += grid_stride())
    for (int32_t a = begin[t] + 1; a < begin[t + 1]; ++a)  // insertion sort: a token has a few rows
      for (int32_t b = a; b > begin[t] && order[b - 1] > order[b]; --b) {
        const int32_t v = order[b];
        order[b] = order[b - 1];
        order[b - 1] = v;
      }
}
// One thread per element of y: its token's rows in ascending order, as the CPU adds them.
__global__ void scatter_kernel(const float* src, const int32_t* begin, const int32_t* order, const float* weight,
                               float* y, int64_t tokens, int64_t hidden) {
  for (int64_t e = grid_index(); e < tokens * hidden; e += grid_stride()) {
    const int64_t t = e / hidden, c = e % hidden;
    float acc = y[e];
    for (int32_t i = begin[t]; i < begin[t + 1]; ++i) {
      const int64_t r = order[i];
      const float w = weight ? weight[r] : 1.0f;
      acc += w * src[r * hidden + c];
    }
    y[e] = acc;
  }
}

__global__ void dots_kernel(const float* dy, const int32_t* token, const float* src, float* dweight, int64_t rows,
                            int64_t hidden) {
  for (int64_t r = grid_index(); r < rows; r += grid_stride()) {
    const float* a = dy + static_cast<int64_t>(token[r]) * hidden;
    const float* b = src + r * hidden;
    double s = 0;
    for (int64_t c = 0; c < hidden; ++c) s += static_cast<double>(a[c]) * b[c];
    dweight[r] = static_cast<float>(s);
  }
}

__global__ void jitter_kernel(const float* x, float* y, int64_t n, float eps, uint64_t seed, uint64_t stream,
                              DropoutRegion r) {
  const PhiloxStream philox(seed, stream);
  for (int64_t i = grid_index(); i < n; i += grid_stride()) {
    const int64_t row = i / r.hidden, h = i % r.hidden;
    const uint64_t g = math::dropout_element(r, row / r.batch, row % r.batch, h);
    y[i] = x[i] * math::jitter_factor(philox.bits(g), eps);
  }
}

}  // namespace

int64_t router_float_scratch(int64_t experts, const TopkRouterOptions& opt) {
  return 2 * experts + 2 * opt.topk + group_count(opt) + kept_groups(opt);
}
int64_t router_int_scratch(const TopkRouterOptions& opt) { return kept_groups(opt) + opt.topk; }

void topk_router_forward(const float* logits, int64_t tokens, int64_t experts, const TopkRouterOptions& opt,
                         const float* expert_bias, int32_t* indices, float* probs, float* fscratch,
                         int32_t* iscratch) {
  if (tokens == 0) return;
  router_forward_kernel<<<grid_for(tokens), kThreads, 0, launch_stream()>>>(
      logits, tokens, experts, opt, group_count(opt), kept_groups(opt), expert_bias, indices, probs, fscratch,
      iscratch);
  check_launch("topk_router_forward");
}

void topk_router_backward(const float* logits, const int32_t* indices, const float* dprobs, int64_t tokens,
                          int64_t experts, const TopkRouterOptions& opt, float* dlogits, float* fscratch) {
  if (tokens == 0) return;
  router_backward_kernel<<<grid_for(tokens), kThreads, 0, launch_stream()>>>(logits, indices, dprobs, tokens, experts,
                                                                             opt, dlogits, fscratch);
  check_launch("topk_router_backward");
}

void aux_loss_counts(const float* logits, int64_t tokens, int64_t experts, int64_t topk, RouterScoreFunction score,
                     int64_t groups, float* counts, float* fscratch, int32_t* top) {
  tessera::cuda::check(cudaMemsetAsync(counts, 0, groups * experts * sizeof(float), launch_stream()),
                       "aux_loss_counts");
  if (tokens == 0) return;
  aux_topk_kernel<<<grid_for(tokens), kThreads, 0, launch_stream()>>>(logits, tokens, experts, topk, score, fscratch,
                                                                      top);
  check_launch("aux_loss_counts");
  count_kernel<<<grid_for(tokens * topk), kThreads, 0, launch_stream()>>>(top, tokens, experts, topk, groups, counts);
  check_launch("aux_loss_counts");
}

void aux_loss_terms(const float* logits, const float* counts, int64_t tokens, int64_t experts, int64_t groups,
                    RouterScoreFunction score, double* per_token, float* fscratch) {
  if (tokens == 0) return;
  aux_terms_kernel<<<grid_for(tokens), kThreads, 0, launch_stream()>>>(logits, counts, tokens, experts, groups, score,
                                                                       per_token, fscratch);
  check_launch("aux_loss_forward");
}

void aux_loss_backward(const float* logits, const float* counts, int64_t tokens, int64_t experts, int64_t groups,
                       RouterScoreFunction score, float c, float* dlogits, float* fscratch) {
  if (tokens == 0) return;
  aux_backward_kernel<<<grid_for(tokens), kThreads, 0, launch_stream()>>>(logits, counts, tokens, experts, groups,
                                                                          score, c, dlogits, fscratch);
  check_launch("aux_loss_backward");
}

void z_loss_terms(const float* logits, int64_t tokens, int64_t experts, double* per_token) {
  if (tokens == 0) return;
  z_terms_kernel<<<grid_for(tokens), kThreads, 0, launch_stream()>>>(logits, tokens, experts, per_token);
  check_launch("z_loss_forward");
}

void sum_terms_to(const double* per_token, int64_t tokens, double* out) {
  sum_terms_kernel<<<1, kThreads, 0, launch_stream()>>>(per_token, tokens, out);  // tokens == 0 writes 0
  check_launch("sum_terms_to");
}

void z_loss_backward(const float* logits, int64_t tokens, int64_t experts, float c, float* dlogits) {
  if (tokens == 0) return;
  z_backward_kernel<<<grid_for(tokens), kThreads, 0, launch_stream()>>>(logits, tokens, experts, c, dlogits);
  check_launch("z_loss_backward");
}

void gather_token_rows(const float* x, const int32_t* token, float* out, int64_t rows, int64_t hidden) {
  if (rows * hidden == 0) return;
  gather_kernel<<<grid_for(rows * hidden), kThreads, 0, launch_stream()>>>(x, token, out, rows, hidden);
  check_launch("gather_token_rows");
}

void scatter_add_token_rows(const float* src, const int32_t* token, const float* weight, float* y, int64_t rows,
                            int64_t hidden, int64_t tokens, int32_t* begin, int32_t* next, int32_t* order) {
  if (rows == 0 || hidden == 0 || tokens == 0) return;
  const char* kernel = "scatter_add_token_rows";
  tessera::cuda::check(cudaMemsetAsync(begin, 0, (tokens + 1) * sizeof(int32_t), launch_stream()), kernel);
  token_count_kernel<<<grid_for(rows), kThreads, 0, launch_stream()>>>(token, rows, begin);
  check_launch(kernel);
  prefix_sum_kernel<<<1, kScanThreads, 0, launch_stream()>>>(begin, next, tokens);
  check_launch(kernel);
  place_rows_kernel<<<grid_for(rows), kThreads, 0, launch_stream()>>>(token, rows, next, order);
  check_launch(kernel);
  sort_rows_kernel<<<grid_for(tokens), kThreads, 0, launch_stream()>>>(begin, tokens, order);
  check_launch(kernel);
  scatter_kernel<<<grid_for(tokens * hidden), kThreads, 0, launch_stream()>>>(src, begin, order, weight, y, tokens,
                                                                              hidden);
  check_launch(kernel);
}

void token_row_dots(const float* dy, const int32_t* token, const float* src, float* dweight, int64_t rows,
                    int64_t hidden) {
  if (rows == 0) return;
  dots_kernel<<<grid_for(rows), kThreads, 0, launch_stream()>>>(dy, token, src, dweight, rows, hidden);
  check_launch("token_row_dots");
}

void jitter_multiply(const float* x, float* y, float eps, uint64_t seed, uint64_t stream, const DropoutRegion& r) {
  const int64_t n = r.seq * r.batch * r.hidden;
  if (n == 0) return;
  if (eps == 0.0f) {  // every multiplier is 1: nothing to draw
    if (x != y)
      tessera::cuda::check(cudaMemcpyAsync(y, x, n * sizeof(float), cudaMemcpyDeviceToDevice, launch_stream()),
                           "jitter_multiply");
    return;
  }
  jitter_kernel<<<grid_for(n), kThreads, 0, launch_stream()>>>(x, y, n, eps, seed, stream, r);
  check_launch("jitter_multiply");
}

}  // namespace tessera::kernels::cuda
