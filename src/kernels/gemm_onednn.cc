// The CPU GEMM backend: oneDNN matmul. oneDNN picks its AVX2/AVX-512 kernels at run time and threads
// with OpenMP. Creating a primitive costs far more than a small GEMM, so primitives are cached per
// shape/transpose/epilogue; transposes are folded into the memory descriptors' strides.
// 16-bit inputs (GemmArgs::input_type) are packed densely, either encoded for oneDNN's 16-bit matmul
// where this CPU has a kernel for it, or rounded into fp32 copies for the fp32 kernel.
#include <dnnl.hpp>

#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "core/profiler.h"
#include "core/progress.h"
#include "kernels/cpu_features.h"
#include "kernels/gemm.h"
#include "kernels/precision.h"

namespace tessera::kernels {
namespace {

using dnnl::memory;

memory::data_type onednn_type(DType t) {
  switch (t) {
    case DType::BF16: return memory::data_type::bf16;
    case DType::F16: return memory::data_type::f16;
    default: return memory::data_type::f32;
  }
}

// A row-major m x n matrix with row stride ld, possibly stored transposed (as n x m).
memory::desc matrix_desc(int64_t rows, int64_t cols, int64_t ld, Trans t, DType type) {
  memory::dims strides = t == Trans::N ? memory::dims{ld, 1} : memory::dims{1, ld};
  return memory::desc({rows, cols}, onednn_type(type), strides);
}

// The stored rows x cols matrix at p (row stride ld) as a dense tensor: its 16-bit encodings of type t
// (encode), or fp32 values rounded to t.
Tensor pack(const float* p, int64_t rows, int64_t cols, int64_t ld, DType t, bool encode) {
  Tensor out = Tensor::empty({rows, cols}, encode ? t : DType::F32);
  if (encode)
    encode_rows(t, p, rows, cols, ld, static_cast<uint16_t*>(out.raw()));
  else
    round_rows(t, p, rows, cols, ld, out.f32());
  return out;
}

class OneDnnGemm final : public GemmBackend {
 public:
  OneDnnGemm() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}

  void gemm(const GemmArgs& g) override {
    // TESSERA_PROFILE=2: one row per shape, e.g. "gemm 2048x50304x384 NT" (m x n x k, transposes,
    // "+=" when accumulating). The buffer outlives the scope, and a GEMM does not nest in a GEMM.
    thread_local char shape_name[96];
    if (profiler::detailed())
      std::snprintf(shape_name, sizeof shape_name, "gemm %lldx%lldx%lld %c%c%s%s", static_cast<long long>(g.m),
                    static_cast<long long>(g.n), static_cast<long long>(g.k), g.trans_a == Trans::N ? 'N' : 'T',
                    g.trans_b == Trans::N ? 'N' : 'T', g.beta != 0.0f ? " +=" : "",
                    g.input_type == DType::F32 ? "" : g.input_type == DType::BF16 ? " bf16" : " fp16");
    TESSERA_PROFILE_SCOPE(profiler::detailed() ? shape_name : "gemm");
    progress::poll();  // let communication in flight advance between kernels (core/progress.h)
    TESSERA_CHECK(g.m >= 0 && g.n >= 0 && g.k >= 0, "gemm: negative size m=", g.m, " n=", g.n, " k=", g.k);
    TESSERA_CHECK(g.bias == nullptr || g.beta == 0.0f, "gemm: a bias epilogue needs beta == 0");
    if (g.m == 0 || g.n == 0) return;
    if (g.k == 0) {  // op(A) op(B) is zero: C = beta * C
      for (int64_t i = 0; i < g.m; ++i)
        for (int64_t j = 0; j < g.n; ++j) {
          float& c = g.c[i * g.ldc + j];
          c = (g.beta == 0.0f ? 0.0f : g.beta * c) + (g.bias ? g.bias[j] : 0.0f);
        }
      return;
    }
    if (g.input_type == DType::F32) return run(g, g.a, g.b, DType::F32);
    TESSERA_CHECK(g.input_type == DType::BF16 || g.input_type == DType::F16, "gemm: inputs of type ",
                  dtype_name(g.input_type), " are not supported");
    // Both inputs packed densely as stored (A is m x k, or k x m when transposed; B likewise).
    GemmArgs dense = g;
    const int64_t a_rows = g.trans_a == Trans::N ? g.m : g.k, b_rows = g.trans_b == Trans::N ? g.k : g.n;
    dense.lda = g.trans_a == Trans::N ? g.k : g.m;
    dense.ldb = g.trans_b == Trans::N ? g.n : g.k;
    if (native_16bit(g.input_type)) {
      Tensor a = pack(g.a, a_rows, dense.lda, g.lda, g.input_type, true);
      Tensor b = pack(g.b, b_rows, dense.ldb, g.ldb, g.input_type, true);
      try {
        return run(dense, a.raw(), b.raw(), g.input_type);
      } catch (const dnnl::error&) {
        // No 16-bit kernel for this shape or epilogue: the rounded fp32 path below.
      }
    }
    // The fp32 kernel on rounded values. An input that is already rounded and dense is used in place:
    // the same primitive on the same values as its rounded copy would be.
    Tensor a, b;
    const float* a_data = g.a;
    const float* b_data = g.b;
    const bool reuse = reuse_rounded_inputs();
    if (!(reuse && g.a_rounded) || g.lda != dense.lda) {
      a = pack(g.a, a_rows, dense.lda, g.lda, g.input_type, false);
      a_data = a.f32();
    }
    if (!(reuse && g.b_rounded) || g.ldb != dense.ldb) {
      b = pack(g.b, b_rows, dense.ldb, g.ldb, g.input_type, false);
      b_data = b.f32();
    }
    run(dense, a_data, b_data, DType::F32);
  }

  bool native_16bit(DType t) override {
    // The CPU decides (kernels/cpu_features.h): oneDNN also builds bf16 kernels that emulate the dot
    // product on plain AVX-512, slower than fp32. Where the CPU has the instruction, oneDNN must also
    // have a non-reference kernel for it (this oneDNN may predate the instruction set).
    if (!cpu_features().native_16bit(t)) return false;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = native_.find(t);
    if (it != native_.end()) return it->second;
    bool native = false;
    try {
      GemmArgs probe;
      probe.m = probe.n = probe.k = probe.lda = probe.ldb = probe.ldc = 256;
      native = make_primitive(probe, t).impl.find("ref") == std::string::npos;
    } catch (const dnnl::error&) {
    }
    return native_[t] = native;
  }

 private:
  // C = alpha op(A) op(B) + beta C with A and B of type `type` at a and b (ld as in g).
  void run(const GemmArgs& g, const void* a_data, const void* b_data, DType type) {
    std::lock_guard<std::mutex> lock(mutex_);
    Key key{g.trans_a, g.trans_b, g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.alpha, g.beta, g.bias != nullptr, type};
    auto it = cache_.find(key);
    if (it == cache_.end()) it = cache_.emplace(key, make_primitive(g, type)).first;
    Entry& e = it->second;
    memory a(e.a_md, engine_, const_cast<void*>(a_data));
    memory b(e.b_md, engine_, const_cast<void*>(b_data));
    memory c(e.c_md, engine_, g.c);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}};
    if (g.bias) args.emplace(DNNL_ARG_BIAS, memory(e.bias_md, engine_, const_cast<float*>(g.bias)));
    e.matmul.execute(stream_, args);
    stream_.wait();
  }

  using Key = std::tuple<Trans, Trans, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float, float, bool, DType>;
  struct Entry {
    dnnl::matmul matmul;
    memory::desc a_md, b_md, c_md, bias_md;
    std::string impl;  // oneDNN's name for the kernel it chose
  };

  Entry make_primitive(const GemmArgs& g, DType type) {
    Entry e;
    e.a_md = matrix_desc(g.m, g.k, g.lda, g.trans_a, type);
    e.b_md = matrix_desc(g.k, g.n, g.ldb, g.trans_b, type);
    e.c_md = memory::desc({g.m, g.n}, memory::data_type::f32, memory::dims{g.ldc, 1});
    if (g.bias) e.bias_md = memory::desc({1, g.n}, memory::data_type::f32, memory::dims{g.n, 1});
    dnnl::primitive_attr attr;
    if (g.alpha != 1.0f) attr.set_output_scales(0, {g.alpha});
    if (g.beta != 0.0f) {
      dnnl::post_ops ops;
      ops.append_sum(g.beta);
      attr.set_post_ops(ops);
    }
    dnnl::matmul::desc desc = g.bias ? dnnl::matmul::desc(e.a_md, e.b_md, e.bias_md, e.c_md)
                                     : dnnl::matmul::desc(e.a_md, e.b_md, e.c_md);
    dnnl::matmul::primitive_desc pd(desc, attr, engine_);
    e.impl = pd.impl_info_str();
    e.matmul = dnnl::matmul(pd);
    return e;
  }

  dnnl::engine engine_;
  dnnl::stream stream_;
  std::mutex mutex_;
  std::map<Key, Entry> cache_;
  std::map<DType, bool> native_;
};

}  // namespace

GemmBackend& GemmBackend::for_device(Device device) {
  TESSERA_CHECK(device.type == DeviceType::CPU, "GEMM on ", device.str(), " is not available in this build");
  static OneDnnGemm cpu_backend;
  return cpu_backend;
}

}  // namespace tessera::kernels
