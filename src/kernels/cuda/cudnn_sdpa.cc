// cuDNN's fused attention behind the CUDA attention's dispatch (kernels/cuda/cudnn_sdpa.h).
#include "kernels/cuda/cudnn_sdpa.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "core/check.h"
#include "kernels/cuda/cuda_runtime.h"
#include "kernels/cuda/precision.h"
#include "kernels/cudnn_library.h"

#if __has_include(<cudnn_graph.h>)
#include "kernels/cuda/cudnn_backend.h"
#include "kernels/cuda/cudnn_sdpa_graph.h"
#define TESSERA_HAVE_CUDNN_GRAPH 1
#endif

namespace tessera::kernels::cuda {

std::string cudnn_attention_refusal(const AttentionShape& s, const AttentionDropout& dropout) {
  if (dropout.p > 0.0f)
    return str_cat("attention dropout ", dropout.p,
                   " (--attention-dropout): cuDNN would draw its own masks, not the CPU's Philox ones; set "
                   "--attention-dropout 0, or TESSERA_CUDA_ATTENTION=tiled or gemm_bf16 for dropout");
  if (s.doc_start != nullptr)
    return "a document mask (--reset-attention-mask) is not expressed in the cuDNN graph; use "
           "TESSERA_CUDA_ATTENTION=tiled or gemm_bf16";
  if (s.key_valid != nullptr)
    return "a padding mask (BERT) is not expressed in the cuDNN graph; use TESSERA_CUDA_ATTENTION=tiled or gemm_bf16";
  if (s.kv_seq > 0 && s.kv_seq != s.seq)
    return str_cat("kv_seq ", s.kv_seq, " != seq ", s.seq,
                   " (keys before the queries: token slices or context parallelism) is not expressed in the cuDNN "
                   "graph; use TESSERA_CUDA_ATTENTION=tiled or gemm_bf16");
  if (s.head_dim % 8 != 0 || s.head_dim > 256)
    return str_cat("head_dim ", s.head_dim,
                   ": cuDNN's fused attention takes a multiple of 8 up to 256; use TESSERA_CUDA_ATTENTION=tiled");
  return "";
}

namespace {

void refuse_unless_supported(const AttentionShape& shape, const AttentionDropout& dropout) {
  const std::string why = cudnn_attention_refusal(shape, dropout);
  TESSERA_CHECK(why.empty(), "TESSERA_CUDA_ATTENTION=cudnn: ", why);
}

#ifdef TESSERA_HAVE_CUDNN_GRAPH
using cudnn::Descriptor;

// One shape's graph, its chosen engine configuration and execution plan, and the workspace it asks for.
struct Plan {
  cudnn::SdpaGraph graph;
  std::unique_ptr<Descriptor> operation_graph, config, plan;
  int64_t workspace_bytes = 0;
};

std::unique_ptr<Plan> build_plan(cudnnHandle_t handle, const cudnn::SdpaDims& dims, bool backward) {
  const std::string name = backward ? "SDPA backward" : "SDPA forward";
  auto p = std::make_unique<Plan>();
  p->graph = backward ? cudnn::build_sdpa_backward(dims) : cudnn::build_sdpa_forward(dims);
  p->operation_graph = std::make_unique<Descriptor>(cudnn::operation_graph(p->graph, name, handle));

  // The engines cuDNN's heuristics rank for the graph; the first whose plan finalizes is kept.
  Descriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, name + ": engine heuristics");
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  heuristics.set_descriptor(TESSERA_CUDNN_ATTR(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH), *p->operation_graph)
      .set(TESSERA_CUDNN_ATTR(CUDNN_ATTR_ENGINEHEUR_MODE), CUDNN_TYPE_HEUR_MODE, 1, &mode)
      .finalize();
  int64_t count = 0;
  cudnn::check(cudnn::api().cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
               name + ": counting the engine heuristics' results");
  std::vector<std::unique_ptr<Descriptor>> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    configs.push_back(std::make_unique<Descriptor>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR,
                                                   str_cat(name, ": engine configuration ", i)));
    raw.push_back(configs.back()->get());
  }
  if (count > 0)
    cudnn::check(cudnn::api().cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count, raw.data()),
                 name + ": reading the engine heuristics' results");
  std::string refusals;
  for (int64_t i = 0; i < count && !p->plan; ++i) {
    try {
      auto plan = std::make_unique<Descriptor>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR,
                                               str_cat(name, ": execution plan of engine configuration ", i));
      plan->set(TESSERA_CUDNN_ATTR(CUDNN_ATTR_EXECUTION_PLAN_HANDLE), CUDNN_TYPE_HANDLE, 1, &handle)
          .set_descriptor(TESSERA_CUDNN_ATTR(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG), *configs[i])
          .finalize();
      int64_t n = 0;
      cudnn::check(cudnn::api().cudnnBackendGetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                         CUDNN_TYPE_INT64, 1, &n, &p->workspace_bytes),
                   name + ": the plan's workspace size");
      p->plan = std::move(plan);
      p->config = std::move(configs[i]);
    } catch (const Error& e) {
      refusals += str_cat("\n  ", e.what());
    }
  }
  TESSERA_CHECK(p->plan != nullptr, "TESSERA_CUDA_ATTENTION=cudnn: cuDNN ", cudnn_version_string(cudnn_library().version),
                " has no engine for the ", name, " graph (batch ", dims.batch, ", heads ", dims.heads, ", kv_heads ",
                dims.kv_heads, ", seq ", dims.seq, ", head_dim ", dims.head_dim, "); ", count,
                " configurations offered", refusals, "\nuse TESSERA_CUDA_ATTENTION=tiled or gemm_bf16");
  return p;
}

// The process's cuDNN handles (one per device, set to its kernel stream, where Tessera's kernels run)
// and plans (one per device, direction and shape), made on first use and kept.
struct Cache {
  std::mutex mutex;
  std::map<int, cudnnHandle_t> handles;
  std::map<std::tuple<int, bool, int64_t, int64_t, int64_t, int64_t, int64_t, bool>, std::unique_ptr<Plan>> plans;
};
Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: cuDNN may be unloaded first at exit
  return *c;
}

std::pair<cudnnHandle_t, Plan*> plan_for(int device, const cudnn::SdpaDims& d, bool backward) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  cudnnHandle_t& handle = c.handles[device];
  if (handle == nullptr) {
    cudnn::check(cudnn::api().cudnnCreate(&handle), str_cat("cudnnCreate on cuda:", device));
    cudnn::check(cudnn::api().cudnnSetStream(handle, static_cast<cudaStream_t>(tessera::cuda::kernel_stream(device))),
                 str_cat("cudnnSetStream on cuda:", device));
  }
  auto& plan = c.plans[{device, backward, d.batch, d.heads, d.kv_heads, d.seq, d.head_dim, d.causal}];
  if (!plan) plan = build_plan(handle, d, backward);
  return {handle, plan.get()};
}

// Device scratch from the caching allocator, stream-ordered: handed back once the work using it is queued.
class Scratch {
 public:
  explicit Scratch(int device) : allocator_(allocator_for(Device{DeviceType::CUDA, device})) {}
  ~Scratch() {
    for (auto& [p, bytes] : blocks_) allocator_.deallocate(p, bytes);
  }
  template <typename T>
  T* get(int64_t count) {
    const size_t bytes = static_cast<size_t>(count > 0 ? count : 1) * sizeof(T);
    void* p = allocator_.allocate(bytes, 256);
    blocks_.emplace_back(p, bytes);
    return static_cast<T*>(p);
  }

 private:
  Allocator& allocator_;
  std::vector<std::pair<void*, size_t>> blocks_;
};

cudnn::SdpaDims dims_of(const AttentionShape& s) {
  return {.batch = s.batch, .heads = s.heads, .kv_heads = s.kv_heads, .seq = s.seq, .kv_seq = s.seq,
          .head_dim = s.head_dim, .causal = s.causal};
}

uint16_t* to_bf16(Scratch& scratch, const float* x, int64_t n) {
  uint16_t* out = scratch.get<uint16_t>(n);
  encode_16bit(DType::BF16, x, out, n);
  return out;
}

void execute(cudnnHandle_t handle, const Plan& plan, const std::vector<std::pair<int64_t, void*>>& bindings,
             void* workspace, const char* name) {
  std::vector<int64_t> uids;
  std::vector<void*> pointers;
  for (const auto& [uid, p] : bindings) {
    uids.push_back(uid);
    pointers.push_back(p);
  }
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, str_cat(name, ": variant pack"));
  pack.set_int64s(TESSERA_CUDNN_ATTR(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS), uids)
      .set(TESSERA_CUDNN_ATTR(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS), CUDNN_TYPE_VOID_PTR,
           static_cast<int64_t>(pointers.size()), pointers.data())
      .set(TESSERA_CUDNN_ATTR(CUDNN_ATTR_VARIANT_PACK_WORKSPACE), CUDNN_TYPE_VOID_PTR, 1, &workspace)
      .finalize();
  cudnn::check(cudnn::api().cudnnBackendExecute(handle, plan.plan->get(), pack.get()), str_cat(name, ": executing"));
}

int current_device() {
  int device = 0;
  tessera::cuda::check(cudaGetDevice(&device), "cudaGetDevice (cuDNN attention)");
  return device;
}
#endif  // TESSERA_HAVE_CUDNN_GRAPH

}  // namespace

#ifdef TESSERA_HAVE_CUDNN_GRAPH
void attention_forward_cudnn(const float* q, const float* k, const float* v, float* out, float* lse,
                             const AttentionShape& shape, float softmax_scale, const AttentionDropout& dropout) {
  refuse_unless_supported(shape, dropout);
  const int device = current_device();
  const cudnn::SdpaDims d = dims_of(shape);
  auto [handle, plan] = plan_for(device, d, false);
  const int64_t n_q = d.seq * d.batch * d.heads * d.head_dim, n_kv = d.seq * d.batch * d.kv_heads * d.head_dim;
  Scratch scratch(device);
  uint16_t* q16 = to_bf16(scratch, q, n_q);
  uint16_t* k16 = to_bf16(scratch, k, n_kv);
  uint16_t* v16 = to_bf16(scratch, v, n_kv);
  uint16_t* o16 = scratch.get<uint16_t>(n_q);
  void* workspace = plan->workspace_bytes > 0 ? scratch.get<uint8_t>(plan->workspace_bytes) : nullptr;
  float scale = softmax_scale, minus_inf = -INFINITY;  // by value: cuDNN reads them when the run is queued
  std::vector<std::pair<int64_t, void*>> bindings{
      {cudnn::kQ, q16}, {cudnn::kK, k16}, {cudnn::kV, v16}, {cudnn::kO, o16}, {cudnn::kStats, lse}, {cudnn::kScale, &scale}};
  if (d.causal) bindings.emplace_back(cudnn::kNegativeInfinity, &minus_inf);
  execute(handle, *plan, bindings, workspace, "SDPA forward");
  widen_16bit(DType::BF16, o16, out, n_q);
}

void attention_backward_cudnn(const float* q, const float* k, const float* v, const float* out, const float* lse,
                              const float* dout, float* dq, float* dk, float* dv, const AttentionShape& shape,
                              float softmax_scale, const AttentionDropout& dropout, int device) {
  refuse_unless_supported(shape, dropout);
  const cudnn::SdpaDims d = dims_of(shape);
  auto [handle, plan] = plan_for(device, d, true);
  const int64_t n_q = d.seq * d.batch * d.heads * d.head_dim, n_kv = d.seq * d.batch * d.kv_heads * d.head_dim;
  Scratch scratch(device);
  uint16_t* q16 = to_bf16(scratch, q, n_q);
  uint16_t* k16 = to_bf16(scratch, k, n_kv);
  uint16_t* v16 = to_bf16(scratch, v, n_kv);
  // out is the forward's bf16 output widened, so this rounding is exact.
  uint16_t* o16 = to_bf16(scratch, out, n_q);
  uint16_t* do16 = to_bf16(scratch, dout, n_q);
  uint16_t* dq16 = scratch.get<uint16_t>(n_q);
  uint16_t* dk16 = scratch.get<uint16_t>(n_kv);
  uint16_t* dv16 = scratch.get<uint16_t>(n_kv);
  float* softmax_sum = scratch.get<float>(d.batch * d.heads * d.seq);
  float* accumulator = scratch.get<float>(n_q);
  // The dQ accumulator is summed into, key block by key block.
  tessera::cuda::check(cudaMemsetAsync(accumulator, 0, static_cast<size_t>(n_q) * sizeof(float),
                                       static_cast<cudaStream_t>(tessera::cuda::kernel_stream(device))),
                       "zeroing the cuDNN attention's dQ accumulator");
  void* workspace = plan->workspace_bytes > 0 ? scratch.get<uint8_t>(plan->workspace_bytes) : nullptr;
  float scale = softmax_scale, minus_inf = -INFINITY, one = 1.0f;
  std::vector<std::pair<int64_t, void*>> bindings{
      {cudnn::kQ, q16},     {cudnn::kK, k16},        {cudnn::kV, v16},    {cudnn::kO, o16},
      {cudnn::kDO, do16},   {cudnn::kStats, const_cast<float*>(lse)}, {cudnn::kDQ, dq16},
      {cudnn::kDK, dk16},   {cudnn::kDV, dv16},      {cudnn::kScale, &scale}, {cudnn::kOne, &one},
      {cudnn::kSoftmaxSum, softmax_sum}, {cudnn::kDQAccumulator, accumulator}};
  if (d.causal) bindings.emplace_back(cudnn::kNegativeInfinity, &minus_inf);
  execute(handle, *plan, bindings, workspace, "SDPA backward");
  widen_16bit(DType::BF16, dq16, dq, n_q);
  widen_16bit(DType::BF16, dk16, dk, n_kv);
  widen_16bit(DType::BF16, dv16, dv, n_kv);
}
#else
void attention_forward_cudnn(const float*, const float*, const float*, float*, float*, const AttentionShape& shape,
                             float, const AttentionDropout& dropout) {
  refuse_unless_supported(shape, dropout);
  throw Error("TESSERA_CUDA_ATTENTION=cudnn: this build's CUDA toolkit had no cudnn_graph.h (cuDNN 9's headers); "
              "use TESSERA_CUDA_ATTENTION=tiled or gemm_bf16");
}
void attention_backward_cudnn(const float*, const float*, const float*, const float*, const float*, const float*,
                              float*, float*, float*, const AttentionShape& shape, float,
                              const AttentionDropout& dropout, int) {
  refuse_unless_supported(shape, dropout);
  throw Error("TESSERA_CUDA_ATTENTION=cudnn: this build's CUDA toolkit had no cudnn_graph.h (cuDNN 9's headers); "
              "use TESSERA_CUDA_ATTENTION=tiled or gemm_bf16");
}
#endif  // TESSERA_HAVE_CUDNN_GRAPH

}  // namespace tessera::kernels::cuda
