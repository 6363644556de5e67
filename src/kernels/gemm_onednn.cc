// The CPU GEMM backend: oneDNN matmul. oneDNN picks its AVX2/AVX-512 kernels at run time and threads
// with OpenMP. Creating a primitive costs far more than a small GEMM, so primitives are cached per
// shape/transpose/epilogue; transposes are folded into the memory descriptors' strides.
#include <dnnl.hpp>

#include <cstdio>
#include <map>
#include <mutex>
#include <tuple>

#include "core/profiler.h"
#include "kernels/gemm.h"

namespace tessera::kernels {
namespace {

using dnnl::memory;

// A row-major m x n matrix with row stride ld, possibly stored transposed (as n x m).
memory::desc matrix_desc(int64_t rows, int64_t cols, int64_t ld, Trans t) {
  memory::dims strides = t == Trans::N ? memory::dims{ld, 1} : memory::dims{1, ld};
  return memory::desc({rows, cols}, memory::data_type::f32, strides);
}

class OneDnnGemm final : public GemmBackend {
 public:
  OneDnnGemm() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}

  void gemm(const GemmArgs& g) override {
    // TESSERA_PROFILE=2: one row per shape, e.g. "gemm 2048x50304x384 NT" (m x n x k, transposes,
    // "+=" when accumulating). The buffer outlives the scope, and a GEMM does not nest in a GEMM.
    thread_local char shape_name[96];
    if (profiler::detailed())
      std::snprintf(shape_name, sizeof shape_name, "gemm %lldx%lldx%lld %c%c%s", static_cast<long long>(g.m),
                    static_cast<long long>(g.n), static_cast<long long>(g.k), g.trans_a == Trans::N ? 'N' : 'T',
                    g.trans_b == Trans::N ? 'N' : 'T', g.beta != 0.0f ? " +=" : "");
    TESSERA_PROFILE_SCOPE(profiler::detailed() ? shape_name : "gemm");
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
    std::lock_guard<std::mutex> lock(mutex_);
    Key key{g.trans_a, g.trans_b, g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.alpha, g.beta, g.bias != nullptr};
    auto it = cache_.find(key);
    if (it == cache_.end()) it = cache_.emplace(key, make_primitive(g)).first;
    Entry& e = it->second;
    memory a(e.a_md, engine_, const_cast<float*>(g.a));
    memory b(e.b_md, engine_, const_cast<float*>(g.b));
    memory c(e.c_md, engine_, g.c);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}};
    if (g.bias) args.emplace(DNNL_ARG_BIAS, memory(e.bias_md, engine_, const_cast<float*>(g.bias)));
    e.matmul.execute(stream_, args);
    stream_.wait();
  }

 private:
  using Key = std::tuple<Trans, Trans, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float, float, bool>;
  struct Entry {
    dnnl::matmul matmul;
    memory::desc a_md, b_md, c_md, bias_md;
  };

  Entry make_primitive(const GemmArgs& g) {
    Entry e;
    e.a_md = matrix_desc(g.m, g.k, g.lda, g.trans_a);
    e.b_md = matrix_desc(g.k, g.n, g.ldb, g.trans_b);
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
    e.matmul = dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, engine_));
    return e;
  }

  dnnl::engine engine_;
  dnnl::stream stream_;
  std::mutex mutex_;
  std::map<Key, Entry> cache_;
};

}  // namespace

GemmBackend& GemmBackend::for_device(Device device) {
  TESSERA_CHECK(device.type == DeviceType::CPU, "GEMM on ", device.str(), " is not available in this build");
  static OneDnnGemm cpu_backend;
  return cpu_backend;
}

}  // namespace tessera::kernels
