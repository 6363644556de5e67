// The CPU GEMM backend: oneDNN matmul. oneDNN picks its AVX2/AVX-512 kernels at run time and threads
// with OpenMP. Creating a primitive costs far more than a small GEMM, so primitives are cached per
// shape/transpose/epilogue/batch; transposes are folded into the memory descriptors' strides, and a
// strided batch is a 3-D matmul (batch strides in the descriptors, a shared matrix as a batch of 1
// that oneDNN broadcasts). The bias is the matmul's bias argument (with alpha != 1, a pass after it). GELU is not oneDNN's eltwise post-op
// (its tanh differs from ours in the last bits) but math::gelu_tanh over C after the matmul, while C is
// still in cache for small shapes: a GEMM with the BiasGeluTanh epilogue is then bitwise the GEMM with
// a bias followed by kernels::gelu_forward, so a model may fuse or not without changing its numbers.
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
#include "kernels/math/activations.h"
#include "kernels/precision.h"
#include "kernels/parallel_grain.h"

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

// A row-major rows x cols matrix with row stride ld, possibly stored transposed (as cols x rows); with
// batch > 1, a batch of them `batch_stride` elements apart, or one matrix shared by the batch (stride
// 0: a batch dimension of 1, which oneDNN broadcasts).
memory::desc matrix_desc(int64_t rows, int64_t cols, int64_t ld, Trans t, DType type, int64_t batch = 1,
                         int64_t batch_stride = 0) {
  memory::dims strides = t == Trans::N ? memory::dims{ld, 1} : memory::dims{1, ld};
  if (batch == 1) return memory::desc({rows, cols}, onednn_type(type), strides);
  const int64_t span = ld * (t == Trans::N ? rows : cols);  // any stride will do for a dimension of 1
  return batch_stride == 0 ? memory::desc({1, rows, cols}, onednn_type(type), {span, strides[0], strides[1]})
                           : memory::desc({batch, rows, cols}, onednn_type(type), {batch_stride, strides[0], strides[1]});
}

// The `count` stored rows x cols matrices at p, `stride` apart (row stride ld), as one dense tensor of
// count * rows rows: their 16-bit encodings of type t (encode), or fp32 values rounded to t.
Tensor pack(const float* p, int64_t count, int64_t stride, int64_t rows, int64_t cols, int64_t ld, DType t,
            bool encode) {
  Tensor out = Tensor::empty({count * rows, cols}, encode ? t : DType::F32, Device::cpu());
  for (int64_t i = 0; i < count; ++i) {
    if (encode)
      encode_rows(t, p + i * stride, rows, cols, ld, static_cast<uint16_t*>(out.raw()) + i * rows * cols);
    else
      round_rows(t, p + i * stride, rows, cols, ld, out.f32() + i * rows * cols);
  }
  return out;
}

// The arguments the CPU backend cannot take, as Errors that say what to use instead.
void check_args(const GemmArgs& g) {
  TESSERA_CHECK(g.m >= 0 && g.n >= 0 && g.k >= 0, "gemm: negative size m=", g.m, " n=", g.n, " k=", g.k);
  TESSERA_CHECK(g.stream.device.type == DeviceType::CPU, "gemm: the CPU backend was given a stream of ",
                g.stream.device.str());
  TESSERA_CHECK(g.a_type == DType::F32 && g.b_type == DType::F32 && g.c_type == DType::F32,
                "gemm: the CPU backend takes fp32 buffers, got a_type=", dtype_name(g.a_type), " b_type=",
                dtype_name(g.b_type), " c_type=", dtype_name(g.c_type),
                " (16-bit multiplication of fp32 buffers is GemmArgs::input_type)");
  const GemmEpilogue e = g.effective_epilogue();
  TESSERA_CHECK((e == GemmEpilogue::Bias || e == GemmEpilogue::BiasGeluTanh) == (g.bias != nullptr), "gemm: epilogue ",
                gemm_epilogue_name(e), g.bias ? " takes no bias, but one was given" : " needs a bias, but none was given");
  TESSERA_CHECK(g.batch >= 1, "gemm: batch must be at least 1, got ", g.batch);
  if (g.batch > 1) {
    TESSERA_CHECK(g.stride_a >= 0 && g.stride_b >= 0 && g.stride_bias >= 0, "gemm: negative batch stride stride_a=",
                  g.stride_a, " stride_b=", g.stride_b, " stride_bias=", g.stride_bias);
    // Matrix i of C spans [i * stride_c, i * stride_c + (m - 1) * ldc + n).
    TESSERA_CHECK(g.m == 0 || g.n == 0 || g.stride_c >= (g.m - 1) * g.ldc + g.n, "gemm: stride_c ", g.stride_c,
                  " makes the ", g.batch, " output matrices of ", g.m, " x ", g.n, " (ldc ", g.ldc, ") overlap");
  }
}

// f(row, bias of its matrix) for every row of every matrix of C, in one parallel pass (the bias null
// where there is none).
template <typename F>
void for_each_c_row(const GemmArgs& g, F f) {
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(2 * g.batch * g.m * g.n))
  for (int64_t r = 0; r < g.batch * g.m; ++r)
    f(g.c + (r / g.m) * g.stride_c + (r % g.m) * g.ldc, g.bias ? g.bias + (r / g.m) * g.stride_bias : nullptr);
}

// C = gelu(C), after the matmul (see the top of the file).
void apply_gelu(const GemmArgs& g) {
  const int64_t n = g.n;
  for_each_c_row(g, [n](float* c, const float*) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) c[j] = math::gelu_tanh(c[j]);
  });
}

class OneDnnGemm final : public GemmBackend {
 public:
  OneDnnGemm() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}

  void gemm(const GemmArgs& g) override {
    // TESSERA_PROFILE=2: one row per shape, e.g. "gemm 2048x50304x384 NT" (m x n x k, transposes,
    // "+=" when accumulating). The buffer outlives the scope, and a GEMM does not nest in a GEMM.
    // A batch and a GELU epilogue are named after the rest: "gemm 64x64x32 NN x12 gelu_tanh".
    thread_local char shape_name[128];
    const GemmEpilogue epilogue = g.effective_epilogue();
    const bool gelu = epilogue == GemmEpilogue::GeluTanh || epilogue == GemmEpilogue::BiasGeluTanh;
    if (profiler::detailed()) {
      char batch[32] = "";
      if (g.batch > 1) std::snprintf(batch, sizeof batch, " x%lld", static_cast<long long>(g.batch));
      std::snprintf(shape_name, sizeof shape_name, "gemm %lldx%lldx%lld %c%c%s%s%s%s", static_cast<long long>(g.m),
                    static_cast<long long>(g.n), static_cast<long long>(g.k), g.trans_a == Trans::N ? 'N' : 'T',
                    g.trans_b == Trans::N ? 'N' : 'T', g.beta != 0.0f ? " +=" : "",
                    g.input_type == DType::F32 ? "" : g.input_type == DType::BF16 ? " bf16" : " fp16", batch,
                    gelu ? " gelu_tanh" : "");
    }
    TESSERA_PROFILE_SCOPE(profiler::detailed() ? shape_name : "gemm");
    progress::poll();  // let communication in flight advance between kernels (core/progress.h)
    check_args(g);
    if (g.m == 0 || g.n == 0) return;
    if (g.k == 0) {  // op(A) op(B) is zero: C = beta * C (+ bias), then GELU
      const int64_t n = g.n;
      for_each_c_row(g, [&g, n](float* c, const float* bias) {
        for (int64_t j = 0; j < n; ++j) c[j] = (g.beta == 0.0f ? 0.0f : g.beta * c[j]) + (bias ? bias[j] : 0.0f);
      });
    } else if (g.bias && (g.alpha != 1.0f || (g.batch > 1 && g.stride_bias != 0))) {
      // oneDNN scales its bias argument by the output scale, alpha (AB + bias), but the bias comes after
      // alpha; and a bias per matrix of a batch (a [batch, 1, n] bias) sends oneDNN 2.7 to its reference
      // kernel, 300x slower. Here the bias is added in the pass after the matmul (with the GELU, if
      // any): the same fp32 sum as the bias argument's. Its binary post-op would do it inside, but gives
      // wrong sums on strided batches (oneDNN 2.6).
      GemmArgs plain = g;
      plain.bias = nullptr;
      multiply(plain);
      const int64_t n = g.n;
      for_each_c_row(g, [n, gelu](float* c, const float* bias) {
        for (int64_t j = 0; j < n; ++j) c[j] = gelu ? math::gelu_tanh(c[j] + bias[j]) : c[j] + bias[j];
      });
      return;
    } else {
      multiply(g);
    }
    if (gelu) apply_gelu(g);
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
  // C = alpha op(A) op(B) + beta C (+ bias) for k > 0, the inputs rounded to input_type.
  void multiply(const GemmArgs& g) {
    if (g.input_type == DType::F32) return run(g, g.a, g.b, DType::F32);
    TESSERA_CHECK(g.input_type == DType::BF16 || g.input_type == DType::F16, "gemm: inputs of type ",
                  dtype_name(g.input_type), " are not supported");
    // Both inputs packed densely as stored (A is m x k, or k x m when transposed; B likewise), each
    // matrix of a batch after the other (a shared one once).
    GemmArgs dense = g;
    const int64_t a_rows = g.trans_a == Trans::N ? g.m : g.k, b_rows = g.trans_b == Trans::N ? g.k : g.n;
    dense.lda = g.trans_a == Trans::N ? g.k : g.m;
    dense.ldb = g.trans_b == Trans::N ? g.n : g.k;
    const int64_t a_count = g.batch > 1 && g.stride_a != 0 ? g.batch : 1;
    const int64_t b_count = g.batch > 1 && g.stride_b != 0 ? g.batch : 1;
    dense.stride_a = a_count > 1 ? a_rows * dense.lda : 0;
    dense.stride_b = b_count > 1 ? b_rows * dense.ldb : 0;
    if (native_16bit(g.input_type)) {
      Tensor a = pack(g.a, a_count, g.stride_a, a_rows, dense.lda, g.lda, g.input_type, true);
      Tensor b = pack(g.b, b_count, g.stride_b, b_rows, dense.ldb, g.ldb, g.input_type, true);
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
    if (!(reuse && g.a_rounded) || g.lda != dense.lda || g.stride_a != dense.stride_a) {
      a = pack(g.a, a_count, g.stride_a, a_rows, dense.lda, g.lda, g.input_type, false);
      a_data = a.f32();
    }
    if (!(reuse && g.b_rounded) || g.ldb != dense.ldb || g.stride_b != dense.stride_b) {
      b = pack(g.b, b_count, g.stride_b, b_rows, dense.ldb, g.ldb, g.input_type, false);
      b_data = b.f32();
    }
    run(dense, a_data, b_data, DType::F32);
  }

  // C = alpha op(A) op(B) + beta C (+ bias) with A and B of type `type` at a and b (ld and batch
  // strides as in g).
  void run(const GemmArgs& g, const void* a_data, const void* b_data, DType type) {
    std::lock_guard<std::mutex> lock(mutex_);
    // A batch of 1 has no strides: one primitive whatever they say.
    const bool batched = g.batch > 1;
    Key key{g.trans_a, g.trans_b, g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.alpha, g.beta, g.bias != nullptr, type,
            g.batch, batched ? g.stride_a : 0, batched ? g.stride_b : 0, batched ? g.stride_c : 0};
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

  // Shape, transposes, leading dimensions, alpha, beta, bias, input type, batch and batch strides (GELU
  // is applied after the primitive, so it is not part of it).
  using Key = std::tuple<Trans, Trans, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float, float, bool, DType,
                         int64_t, int64_t, int64_t, int64_t>;
  struct Entry {
    dnnl::matmul matmul;
    memory::desc a_md, b_md, c_md, bias_md;
    std::string impl;  // oneDNN's name for the kernel it chose
  };

  Entry make_primitive(const GemmArgs& g, DType type) {
    Entry e;
    e.a_md = matrix_desc(g.m, g.k, g.lda, g.trans_a, type, g.batch, g.stride_a);
    e.b_md = matrix_desc(g.k, g.n, g.ldb, g.trans_b, type, g.batch, g.stride_b);
    if (g.batch == 1) {
      e.c_md = memory::desc({g.m, g.n}, memory::data_type::f32, memory::dims{g.ldc, 1});
      if (g.bias) e.bias_md = memory::desc({1, g.n}, memory::data_type::f32, memory::dims{g.n, 1});
    } else {
      e.c_md = memory::desc({g.batch, g.m, g.n}, memory::data_type::f32, memory::dims{g.stride_c, g.ldc, 1});
      if (g.bias) e.bias_md = memory::desc({1, 1, g.n}, memory::data_type::f32, memory::dims{g.n, g.n, 1});
    }
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

const char* gemm_epilogue_name(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::None: return "none";
    case GemmEpilogue::Bias: return "bias";
    case GemmEpilogue::BiasGeluTanh: return "bias+gelu_tanh";
    case GemmEpilogue::GeluTanh: return "gelu_tanh";
  }
  return "?";
}

GemmBackend& cpu_gemm_backend() {
  static OneDnnGemm cpu_backend;
  return cpu_backend;
}

}  // namespace tessera::kernels
