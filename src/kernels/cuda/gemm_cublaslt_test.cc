// The cuBLASLt GEMM backend against the CPU's oneDNN one on random products (every transpose, leading
// dimensions with padding, strided batches, each epilogue, fp32, fp32 multiplied as bf16/fp16, and bf16
// buffers). Loading and registering needs only the toolkit; the products need a GPU and are skipped,
// with CUDA's reason, without one.
#include "kernels/cuda/gemm_cublaslt.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "kernels/cuda/cuda_runtime.h"
#include "kernels/gemm.h"

namespace tessera::cuda {
namespace {

using kernels::GemmArgs;
using kernels::GemmEpilogue;
using kernels::Trans;

const Device kGpu{DeviceType::CUDA, 0};

TEST(CublasLtGemm, RegisteringMakesItTheCudaDevicesBackend) {
  register_gemm_backend();
  register_gemm_backend();  // idempotent
  kernels::GemmBackend& b = kernels::GemmBackend::for_device(kGpu);
  EXPECT_NE(&b, &kernels::GemmBackend::for_device(Device::cpu()));
  EXPECT_TRUE(b.native_16bit(DType::BF16));
  EXPECT_TRUE(b.native_16bit(DType::F16));
}

// A device copy of host floats (as fp32, or rounded to bf16 when `bf16`), freed with the object.
struct DeviceBuffer {
  void* p = nullptr;
  DeviceBuffer(const std::vector<float>& host, bool bf16 = false) {
    const size_t bytes = host.size() * (bf16 ? 2 : 4);
    check(cudaMalloc(&p, bytes ? bytes : 4), "cudaMalloc");
    if (bf16) {
      std::vector<uint16_t> h(host.size());
      for (size_t i = 0; i < h.size(); ++i) h[i] = fp32_to_bf16(host[i]);
      check(cudaMemcpy(p, h.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    } else {
      check(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    }
    // The legacy stream's copy is not ordered with the kernel stream the GEMMs run on: done before them.
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  ~DeviceBuffer() { cudaFree(p); }
  std::vector<float> read(size_t n) const {
    std::vector<float> h(n);
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // the GEMMs on the kernel stream
    check(cudaMemcpy(h.data(), p, n * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
    return h;
  }
};

class CublasLtOnDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (device_count(&why) == 0) GTEST_SKIP() << why;
    register_gemm_backend();
  }
};

std::vector<float> random_floats(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

TEST_F(CublasLtOnDevice, RandomProductsMatchTheCpuBackend) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> dim(1, 70), pad(0, 5), coin(0, 1), batches(1, 3), epilogue(0, 3);
  const DType input_types[] = {DType::F32, DType::BF16, DType::F16};
  for (int trial = 0; trial < 120; ++trial) {
    GemmArgs g;
    g.trans_a = coin(rng) ? Trans::T : Trans::N;
    g.trans_b = coin(rng) ? Trans::T : Trans::N;
    g.m = dim(rng), g.n = dim(rng), g.k = dim(rng);
    const int64_t a_rows = g.trans_a == Trans::N ? g.m : g.k, a_row = g.trans_a == Trans::N ? g.k : g.m;
    const int64_t b_rows = g.trans_b == Trans::N ? g.k : g.n, b_row = g.trans_b == Trans::N ? g.n : g.k;
    g.lda = a_row + pad(rng), g.ldb = b_row + pad(rng), g.ldc = g.n + pad(rng);
    g.batch = batches(rng);
    g.stride_a = a_rows * g.lda, g.stride_b = coin(rng) ? 0 : b_rows * g.ldb, g.stride_c = g.m * g.ldc;
    g.epilogue = static_cast<GemmEpilogue>(epilogue(rng));
    const bool with_bias = g.epilogue == GemmEpilogue::Bias || g.epilogue == GemmEpilogue::BiasGeluTanh;
    g.stride_bias = with_bias && coin(rng) ? g.n : 0;
    g.beta = coin(rng) ? 0.0f : 0.5f;
    const bool bf16_buffers = trial % 5 == 4;
    g.input_type = bf16_buffers ? DType::BF16 : input_types[trial % 3];
    auto a = random_floats(g.stride_a * (g.batch - 1) + a_rows * g.lda, rng);
    auto b = random_floats(g.stride_b * (g.batch - 1) + b_rows * g.ldb, rng);
    auto c = random_floats(g.stride_c * g.batch, rng);
    auto bias = random_floats(g.stride_bias * (g.batch - 1) + g.n, rng);
    if (bf16_buffers) {  // the CPU multiplies the same bf16 values
      for (float& x : a) x = bf16_to_fp32(fp32_to_bf16(x));
      for (float& x : b) x = bf16_to_fp32(fp32_to_bf16(x));
    }

    GemmArgs cpu = g;
    std::vector<float> c_cpu = c;
    cpu.a = a.data(), cpu.b = b.data(), cpu.c = c_cpu.data(), cpu.bias = with_bias ? bias.data() : nullptr;
    kernels::gemm(cpu);

    DeviceBuffer da(a, bf16_buffers), db(b, bf16_buffers), dc(c), dbias(bias);
    GemmArgs gpu = g;
    gpu.a = static_cast<const float*>(da.p), gpu.b = static_cast<const float*>(db.p);
    gpu.c = static_cast<float*>(dc.p), gpu.bias = with_bias ? static_cast<const float*>(dbias.p) : nullptr;
    if (bf16_buffers) gpu.a_type = gpu.b_type = DType::BF16;
    gpu.stream = Stream::default_for(kGpu);
    kernels::gemm(gpu);
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    const std::vector<float> c_gpu = dc.read(c.size());

    // fp32 accumulates k products in another order; 16-bit inputs round each to 8 (bf16) or 11 bits.
    const double tolerance = g.input_type == DType::F32 ? 1e-5 : 1e-2;
    for (size_t i = 0; i < c.size(); ++i) {
      ASSERT_NEAR(c_gpu[i], c_cpu[i], tolerance * (1.0 + std::sqrt(static_cast<double>(g.k))))
          << "trial " << trial << " element " << i << " m=" << g.m << " n=" << g.n << " k=" << g.k
          << " epilogue " << kernels::gemm_epilogue_name(g.epilogue) << " input " << dtype_name(g.input_type);
    }
  }
}

// Operands that start at any 4-byte offset (views into larger buffers, as a ParameterSet's parameters
// are): the backend tells cuBLASLt each buffer's alignment instead of its default 256 bytes.
TEST_F(CublasLtOnDevice, OperandsAtOddOffsetsMatchTheCpuBackend) {
  std::mt19937 rng(12);
  for (int64_t shift : {1, 2, 3, 5}) {
    for (DType input_type : {DType::F32, DType::BF16}) {
      GemmArgs g;
      g.trans_b = Trans::T;
      g.m = 37, g.n = 29, g.k = 53;
      g.lda = g.k, g.ldb = g.k, g.ldc = g.n;
      g.beta = 0.5f;
      g.input_type = input_type;
      auto a = random_floats(shift + g.m * g.k, rng), b = random_floats(shift + g.n * g.k, rng);
      auto c = random_floats(shift + g.m * g.n, rng);
      GemmArgs cpu = g;
      std::vector<float> c_cpu = c;
      cpu.a = a.data() + shift, cpu.b = b.data() + shift, cpu.c = c_cpu.data() + shift;
      kernels::gemm(cpu);

      DeviceBuffer da(a), db(b), dc(c);
      GemmArgs gpu = g;
      gpu.a = static_cast<const float*>(da.p) + shift, gpu.b = static_cast<const float*>(db.p) + shift;
      gpu.c = static_cast<float*>(dc.p) + shift;
      gpu.stream = Stream::default_for(kGpu);
      kernels::gemm(gpu);
      check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      const std::vector<float> c_gpu = dc.read(c.size());
      const double tolerance = (input_type == DType::F32 ? 1e-5 : 1e-2) * (1.0 + std::sqrt(static_cast<double>(g.k)));
      for (size_t i = 0; i < c.size(); ++i)
        ASSERT_NEAR(c_gpu[i], c_cpu[i], tolerance) << "shift " << shift << " element " << i << " input "
                                                   << dtype_name(input_type);
    }
  }
}

// GemmArgs::tf32: fp32 buffers multiplied on TF32 tensor cores. Each element is within TF32's rounding
// of the CPU's fp32 product (both inputs rounded to 10-bit mantissas: at most 2^-10 of sum |a||b|, plus
// fp32 accumulation), and some element differs from the GPU's own fp32 product by more than fp32's
// tolerance, which says TF32 was used.
TEST_F(CublasLtOnDevice, Tf32ProductsAreWithinTf32OfTheCpus) {
  std::mt19937 rng(13);
  GemmArgs g;
  g.trans_b = Trans::T;
  g.m = 64, g.n = 48, g.k = 512;
  g.lda = g.k, g.ldb = g.k, g.ldc = g.n;
  const auto a = random_floats(g.m * g.k, rng), b = random_floats(g.n * g.k, rng);
  std::vector<float> c_cpu(g.m * g.n);
  GemmArgs cpu = g;
  cpu.a = a.data(), cpu.b = b.data(), cpu.c = c_cpu.data();
  kernels::gemm(cpu);

  auto on_gpu = [&](bool tf32) {
    DeviceBuffer da(a), db(b), dc(c_cpu);
    GemmArgs gpu = g;
    gpu.tf32 = tf32;
    gpu.a = static_cast<const float*>(da.p), gpu.b = static_cast<const float*>(db.p);
    gpu.c = static_cast<float*>(dc.p);
    gpu.stream = Stream::default_for(kGpu);
    kernels::gemm(gpu);
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    return dc.read(c_cpu.size());
  };
  const std::vector<float> tf32 = on_gpu(true), fp32 = on_gpu(false);
  const double fp32_tolerance = 1e-5 * (1.0 + std::sqrt(static_cast<double>(g.k)));
  double largest_tf32_gap = 0;
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t j = 0; j < g.n; ++j) {
      double magnitude = 0;
      for (int64_t p = 0; p < g.k; ++p) magnitude += std::fabs(a[i * g.k + p] * b[j * g.k + p]);
      const size_t e = static_cast<size_t>(i * g.n + j);
      ASSERT_NEAR(tf32[e], c_cpu[e], std::ldexp(magnitude, -10) + fp32_tolerance) << "element " << e;
      largest_tf32_gap = std::max(largest_tf32_gap, std::fabs(static_cast<double>(tf32[e]) - fp32[e]));
    }
  EXPECT_GT(largest_tf32_gap, fp32_tolerance) << "the TF32 product is the fp32 one: TF32 was not used";
}

// The batched-GEMM attention's operands (kernels/gemm_attention.cc): the sequence-major [seq, batch * heads,
// d] activations as a strided batch whose matrices interleave, matrix t at t * d with row stride
// batch * heads * d, so that consecutive matrices share rows; the output too (O, dQ; dK and dV
// accumulated with beta = 1). cuBLASLt asks only that a leading dimension covers its row (column-major:
// ld >= rows) and says nothing against a batch stride below ld * cols; the elements written never
// overlap. Checked here on its own, against the CPU backend, so that an attention failure on a device
// says whether this layout is the cause.
TEST_F(CublasLtOnDevice, InterleavedBatchesMatchTheCpuBackend) {
  std::mt19937 rng(14);
  const int64_t seq = 37, heads = 6, d = 16;  // heads: the batch of (sample, head) matrices
  const int64_t ld = heads * d, elements = seq * ld;
  for (DType input_type : {DType::F32, DType::BF16}) {
    for (float beta : {0.0f, 1.0f}) {
      // O = P V: P [seq, seq] per head (contiguous scratch), V and O interleaved [seq, d] views.
      GemmArgs g;
      g.m = seq, g.n = d, g.k = seq;
      g.lda = seq, g.stride_a = seq * seq;
      g.ldb = ld, g.stride_b = d;
      g.ldc = ld, g.stride_c = d;
      g.batch = heads;
      g.beta = beta;
      g.input_type = input_type;
      const auto p = random_floats(heads * seq * seq, rng), v = random_floats(elements, rng);
      const auto o = random_floats(elements, rng);
      GemmArgs cpu = g;
      std::vector<float> o_cpu = o;
      cpu.a = p.data(), cpu.b = v.data(), cpu.c = o_cpu.data();
      kernels::gemm(cpu);

      DeviceBuffer dp(p), dv(v), dout(o);
      GemmArgs gpu = g;
      gpu.a = static_cast<const float*>(dp.p), gpu.b = static_cast<const float*>(dv.p);
      gpu.c = static_cast<float*>(dout.p);
      gpu.stream = Stream::default_for(kGpu);
      kernels::gemm(gpu);
      const std::vector<float> o_gpu = dout.read(o.size());
      const double tolerance = (input_type == DType::F32 ? 1e-5 : 1e-2) * (1.0 + std::sqrt(static_cast<double>(g.k)));
      for (size_t i = 0; i < o.size(); ++i)
        ASSERT_NEAR(o_gpu[i], o_cpu[i], tolerance) << "element " << i << " (row " << i / ld << ", head "
                                                   << i % ld / d << ") input " << dtype_name(input_type)
                                                   << " beta " << beta;
    }
  }
}

TEST_F(CublasLtOnDevice, MixedBufferTypesAreAClearError) {
  std::vector<float> x(16, 1.0f);
  DeviceBuffer a(x), b(x, true), c(x);
  GemmArgs g;
  g.m = g.n = g.k = 2, g.lda = g.ldb = g.ldc = 2;
  g.a = static_cast<const float*>(a.p), g.b = static_cast<const float*>(b.p), g.c = static_cast<float*>(c.p);
  g.b_type = DType::BF16;
  g.stream = Stream::default_for(kGpu);
  EXPECT_THROW(kernels::gemm(g), Error);
}

}  // namespace
}  // namespace tessera::cuda
