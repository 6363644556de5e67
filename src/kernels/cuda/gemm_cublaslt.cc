#include "kernels/cuda/gemm_cublaslt.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "core/check.h"
#include "kernels/cuda/cuda_runtime.h"
#include "kernels/gemm.h"
#include "kernels/gemm_column_major.h"

namespace tessera::cuda {
namespace {

using kernels::ColumnMajorGemm;
using kernels::ColumnMajorOperand;
using kernels::GemmArgs;
using kernels::GemmEpilogue;

// The cuBLASLt entry points the backend calls, resolved from the library when it is registered.
#define TESSERA_CUBLASLT_FUNCTIONS(X)                                                                   \
  X(cublasLtCreate) X(cublasLtGetStatusString) X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescSetAttribute) \
  X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutSetAttribute) X(cublasLtMatmulPreferenceCreate)       \
  X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulAlgoGetHeuristic) \
  X(cublasLtMatmul)

struct CublasLt {
#define TESSERA_DECLARE(name) decltype(&::name) name = nullptr;
  TESSERA_CUBLASLT_FUNCTIONS(TESSERA_DECLARE)
#undef TESSERA_DECLARE
};

const CublasLt& load_cublaslt() {
  static const CublasLt lib = [] {
    const std::string so = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
    std::string tried, error;
    void* handle = nullptr;
    std::string candidates[] = {so, "", "/usr/local/cuda/lib64/" + so};
    if (const char* home = std::getenv("CUDA_HOME")) candidates[1] = std::string(home) + "/lib64/" + so;
    for (const std::string& path : candidates) {
      if (path.empty()) continue;
      handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle) break;
      tried += (tried.empty() ? "" : ", ") + path;
      error = dlerror();
    }
    TESSERA_CHECK(handle != nullptr, "the CUDA GEMM backend needs cuBLASLt: could not load ", tried, " (", error, ")");
    CublasLt l;
#define TESSERA_RESOLVE(name)                                                                      \
  l.name = reinterpret_cast<decltype(l.name)>(dlsym(handle, #name));                               \
  TESSERA_CHECK(l.name != nullptr, so, " has no ", #name);
    TESSERA_CUBLASLT_FUNCTIONS(TESSERA_RESOLVE)
#undef TESSERA_RESOLVE
    return l;
  }();
  return lib;
}

void check_lt(cublasStatus_t status, const char* what) {
  TESSERA_CHECK(status == CUBLAS_STATUS_SUCCESS, what, " failed: ", load_cublaslt().cublasLtGetStatusString(status));
}

cudaDataType_t cuda_type(DType t, const char* operand) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F16: return CUDA_R_16F;
    default: break;
  }
  TESSERA_CHECK(false, "gemm on CUDA: ", operand, " of type ", dtype_name(t), " (fp32, bf16 or fp16 only)");
  return CUDA_R_32F;
}

// fp32 buffers multiplied as input_type (gemm.h) are cuBLASLt's fast-16-bit compute types, and as TF32
// its fast-TF32 one; 16-bit buffers are multiplied as they are, accumulating in fp32.
cublasComputeType_t compute_type(const GemmArgs& g) {
  const bool fp32_inputs = g.a_type == DType::F32 && g.b_type == DType::F32;
  if (!fp32_inputs) {
    TESSERA_CHECK(g.a_type == g.b_type, "gemm on CUDA: A of type ", dtype_name(g.a_type), " with B of type ",
                  dtype_name(g.b_type), " (both must be the same)");
    return CUBLAS_COMPUTE_32F;
  }
  if (g.input_type == DType::BF16) return CUBLAS_COMPUTE_32F_FAST_16BF;
  if (g.input_type == DType::F16) return CUBLAS_COMPUTE_32F_FAST_16F;
  return g.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

cublasLtEpilogue_t lt_epilogue(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::None: return CUBLASLT_EPILOGUE_DEFAULT;
    case GemmEpilogue::Bias: return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::GeluTanh: return CUBLASLT_EPILOGUE_GELU;
    case GemmEpilogue::BiasGeluTanh: return CUBLASLT_EPILOGUE_GELU_BIAS;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

template <typename T>
void set_layout(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attribute, T value) {
  check_lt(load_cublaslt().cublasLtMatrixLayoutSetAttribute(layout, attribute, &value, sizeof value),
           "cublasLtMatrixLayoutSetAttribute");
}

template <typename T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, T value) {
  check_lt(load_cublaslt().cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof value),
           "cublasLtMatmulDescSetAttribute");
}

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                                   int64_t stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  check_lt(load_cublaslt().cublasLtMatrixLayoutCreate(&layout, type, rows, cols, ld), "cublasLtMatrixLayoutCreate");
  if (batch > 1) {
    set_layout(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, static_cast<int32_t>(batch));
    set_layout(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride);
  }
  return layout;
}

// The largest power of two up to 256 dividing the address of every matrix of a batch (matrix i at p +
// i * stride_bytes). cuBLASLt's heuristic assumes 256-byte aligned buffers unless told otherwise, and
// may then pick a kernel that faults on a view into a larger buffer (a parameter of a ParameterSet's
// flat buffer, a row range of an activation).
uint32_t alignment(const void* p, int64_t batch, int64_t stride_bytes) {
  uintptr_t bits = reinterpret_cast<uintptr_t>(p) | 256u;
  if (batch > 1) bits |= static_cast<uintptr_t>(stride_bytes);
  return static_cast<uint32_t>(bits & (~bits + 1));  // the lowest set bit
}

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // what NVIDIA suggests for Hopper

// Everything about one GEMM shape that cuBLASLt can reuse: descriptors and the chosen algorithm. Kept for
// the life of the process, as the shapes of a training run are few.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

using PlanKey = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                           int64_t, int, int, int, int, int, int, int64_t, int64_t, int64_t, bool, uint32_t,
                           uint32_t, uint32_t>;

// The caller's stream, or where it names the default one (Stream::default_for) the device's kernel
// stream, where the other kernels run: never the legacy default stream, which is not ordered with it.
cudaStream_t stream_of(const Stream& s, int device) {
  return static_cast<cudaStream_t>(s.native ? s.native : kernel_stream(device));
}

class CublasLtGemm final : public kernels::GemmBackend {
 public:
  void gemm(const GemmArgs& args) override {
    const ColumnMajorGemm g = kernels::to_column_major(args);
    if (g.m == 0 || g.n == 0) return;
    TESSERA_CHECK(g.k > 0, "gemm on CUDA: k=0 (an empty inner dimension) is not supported");
    const int device = args.stream.device.index;
    const cublasComputeType_t compute = compute_type(args);
    std::lock_guard<std::mutex> lock(mutex_);  // a plan's descriptor takes each call's bias pointer
    check(cudaSetDevice(device), "cudaSetDevice");
    Plan& plan = plan_for(device, g, compute);
    if (g.bias) set_desc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(g.bias));
    check_lt(load_cublaslt().cublasLtMatmul(handle(device), plan.desc, &g.alpha, g.a.data, plan.a, g.b.data, plan.b,
                                            &g.beta, g.c, plan.c, g.c, plan.c, &plan.algo, workspace(device),
                                            kWorkspaceBytes, stream_of(args.stream, device)),
             "cublasLtMatmul");
  }

  bool native_16bit(DType t) override { return t == DType::BF16 || t == DType::F16; }

 private:
  cublasLtHandle_t handle(int device) {
    cublasLtHandle_t& h = handles_[device];
    if (!h) check_lt(load_cublaslt().cublasLtCreate(&h), "cublasLtCreate");
    return h;
  }

  void* workspace(int device) {
    void*& w = workspaces_[device];
    if (!w) check(cudaMalloc(&w, kWorkspaceBytes), "cudaMalloc (cuBLASLt workspace)");
    return w;
  }

  Plan& plan_for(int device, const ColumnMajorGemm& g, cublasComputeType_t compute) {
    const uint32_t align_a = alignment(g.a.data, g.batch, g.a.stride * static_cast<int64_t>(dtype_size(g.a.type)));
    const uint32_t align_b = alignment(g.b.data, g.batch, g.b.stride * static_cast<int64_t>(dtype_size(g.b.type)));
    const uint32_t align_c = alignment(g.c, g.batch, g.stride_c * static_cast<int64_t>(dtype_size(g.c_type)));
    const PlanKey key{device,  g.m,        g.n,        g.k,       g.a.rows, g.a.ld, g.a.stride,
                      g.b.rows, g.b.ld,    g.b.stride, g.ldc,     g.a.trans, g.b.trans,
                      static_cast<int>(g.a.type), static_cast<int>(g.b.type), static_cast<int>(g.c_type),
                      static_cast<int>(g.epilogue) * 1000 + static_cast<int>(compute), g.batch, g.stride_c,
                      g.stride_bias, g.beta != 0.0f, align_a, align_b, align_c};
    if (auto it = plans_.find(key); it != plans_.end()) return it->second;
    const CublasLt& lt = load_cublaslt();
    Plan p;
    check_lt(lt.cublasLtMatmulDescCreate(&p.desc, compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, g.a.trans ? CUBLAS_OP_T : CUBLAS_OP_N);
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, g.b.trans ? CUBLAS_OP_T : CUBLAS_OP_N);
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, lt_epilogue(g.epilogue));
    if (g.bias) {
      set_desc(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, CUDA_R_32F);
      set_desc(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(g.bias));
      if (g.batch > 1) set_desc(p.desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, g.stride_bias);
    }
    p.a = make_layout(cuda_type(g.a.type, "B"), g.a.rows, g.a.cols, g.a.ld, g.batch, g.a.stride);
    p.b = make_layout(cuda_type(g.b.type, "A"), g.b.rows, g.b.cols, g.b.ld, g.batch, g.b.stride);
    p.c = make_layout(cuda_type(g.c_type, "C"), g.m, g.n, g.ldc, g.batch, g.stride_c);

    cublasLtMatmulPreference_t preference = nullptr;
    check_lt(lt.cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
    const uint64_t workspace_bytes = kWorkspaceBytes;
    check_lt(lt.cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &workspace_bytes, sizeof workspace_bytes),
             "cublasLtMatmulPreferenceSetAttribute");
    // The buffers' real alignments (C and D are one buffer), so that only kernels that work on them are
    // offered.
    for (auto [attribute, bytes] : {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a},
                                    std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b},
                                    std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c},
                                    std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_c}})
      check_lt(lt.cublasLtMatmulPreferenceSetAttribute(preference, attribute, &bytes, sizeof bytes),
               "cublasLtMatmulPreferenceSetAttribute");
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t status = lt.cublasLtMatmulAlgoGetHeuristic(handle(device), p.desc, p.a, p.b, p.c, p.c,
                                                                    preference, 1, &result, &found);
    lt.cublasLtMatmulPreferenceDestroy(preference);
    check_lt(status, "cublasLtMatmulAlgoGetHeuristic");
    TESSERA_CHECK(found > 0, "cuBLASLt has no algorithm for a GEMM of m=", g.n, " n=", g.m, " k=", g.k, " (row-major), ",
                  kernels::gemm_epilogue_name(g.epilogue), ", batch ", g.batch);
    p.algo = result.algo;
    return plans_.emplace(key, p).first->second;
  }

  std::mutex mutex_;
  std::map<int, cublasLtHandle_t> handles_;
  std::map<int, void*> workspaces_;
  std::map<PlanKey, Plan> plans_;
};

}  // namespace

void register_gemm_backend() {
  static CublasLtGemm backend;
  load_cublaslt();  // fails here, with the reason, rather than at the first GEMM
  kernels::GemmBackend::register_backend(DeviceType::CUDA, &backend);
}

}  // namespace tessera::cuda
