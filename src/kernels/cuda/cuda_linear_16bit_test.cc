// The CUDA linear layer on 16-bit GEMM buffers (kernels::gpu_16bit_gemm_buffers, the default): under
// --bf16/--fp16 each input reaches cuBLASLt as a bf16 (fp16) buffer, weights as the parameter set's
// 16-bit copies, activations encoded once per call, multiplied with fp32 accumulation into fp32 outputs
// (CUBLAS_COMPUTE_32F over CUDA_R_16BF A and B). The inputs' values are those the fp32-buffer path
// (step 1: fp32 buffers that cuBLASLt rounds) and the CPU multiply, so all three must agree within fp32
// accumulation-order differences: forward, both backward products and the bias gradient (bit for bit),
// with inputs rounded already (as the model passes them) and not (encoded here, nearest even as the
// CPU rounds). Skipped, with CUDA's reason, where no GPU is present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>

#include "core/check.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "kernels/cuda/device_testing.h"
#include "kernels/linear.h"
#include "kernels/precision.h"

namespace tessera::cuda {
namespace {

using namespace testing;

// Restores the default (16-bit buffers) whatever a test switched.
class CudaLinear16Bit : public CudaKernelTest {
 protected:
  void TearDown() override { kernels::set_gpu_16bit_gemm_buffers(true); }
};

// rows, in, out: odd sizes (16-bit rows of odd length are 2-byte aligned only) and a few larger ones.
const std::tuple<int64_t, int64_t, int64_t> kShapes[] = {{1, 1, 1},     {3, 7, 5},      {17, 33, 65},
                                                         {64, 130, 257}, {5, 1031, 3},  {301, 96, 129},
                                                         {256, 768, 2304}};

// Products of 16-bit values are exact in fp32, so the paths differ only in the order (and the tensor
// cores' way) of adding k fp32 terms of magnitude up to 1: a few ulps of the sum per sqrt(k) terms.
float sum_tol(int64_t k) { return static_cast<float>(4e-5 * (1.0 + std::sqrt(static_cast<double>(k)))); }

Tensor rounded(DType t, const Tensor& x) {
  Tensor r = Tensor::empty(x.shape(), DType::F32, Device::cpu());
  kernels::round_to(t, x, r);
  return r;
}

// y on the GPU with inputs as the model passes them: x fp32, w the 16-bit copy (16-bit buffers on) or
// the fp32 rounded one (off).
Tensor gpu_forward(const Tensor& x, const Tensor& w, const Tensor& b, DType t, bool x_rounded, bool sixteen) {
  kernels::set_gpu_16bit_gemm_buffers(sixteen);
  const Tensor w_gpu = sixteen ? kernels::store_as(t, to_device(w)) : to_device(w);
  Tensor y = to_device(Tensor::zeros({x.dim(0), w.dim(0)}, DType::F32, Device::cpu()));
  kernels::linear_forward(to_device(x), w_gpu, to_device(b), y, t, x_rounded, true);
  return to_host(y);
}

TEST_F(CudaLinear16Bit, ForwardMatchesTheFp32BufferPathAndTheCpu) {
  for (auto [rows, in, out] : kShapes) {
    for (DType t : {DType::BF16, DType::F16}) {
      for (bool x_rounded : {true, false}) {
        SCOPED_TRACE(::testing::Message() << rows << "x" << in << " -> " << out << " " << dtype_name(t)
                                          << (x_rounded ? " rounded x" : " fp32 x"));
        const Tensor x0 = random({rows, in}, 1), w = rounded(t, random({out, in}, 2)), b = random({out}, 3);
        const Tensor x = x_rounded ? rounded(t, x0) : x0;
        Tensor y_cpu = Tensor::zeros({rows, out}, DType::F32, Device::cpu());
        kernels::linear_forward(x, w, b, y_cpu, t, x_rounded, true);
        const Tensor y16 = gpu_forward(x, w, b, t, x_rounded, true);
        EXPECT_TRUE(all_close(y16, y_cpu, 0.0f, sum_tol(in))) << "16-bit buffers vs the CPU";
        // The fp32-buffer path rounds inside cuBLASLt; with inputs rounded already the values are the same.
        if (x_rounded) {
          EXPECT_TRUE(all_close(y16, gpu_forward(x, w, b, t, true, false), 0.0f, sum_tol(in)))
              << "16-bit buffers vs fp32 buffers";
        }
      }
    }
  }
}

TEST_F(CudaLinear16Bit, BackwardMatchesTheFp32BufferPathAndTheCpu) {
  for (auto [rows, in, out] : kShapes) {
    SCOPED_TRACE(::testing::Message() << rows << "x" << in << " -> " << out);
    const DType t = DType::BF16;
    const Tensor x = rounded(t, random({rows, in}, 4)), w = rounded(t, random({out, in}, 5));
    const Tensor dy = random({rows, out}, 6);  // fp32: the bias gradient sums it unrounded
    const Tensor dx0 = random({rows, in}, 7), dw0 = random({out, in}, 8), db0 = random({out}, 9);
    Tensor dx = dx0.clone(), dw = dw0.clone(), db = db0.clone();
    kernels::linear_backward(dy, x, w, dx, dw, db, t, true, true);
    Tensor results[2][3];
    for (bool sixteen : {true, false}) {
      kernels::set_gpu_16bit_gemm_buffers(sixteen);
      const Tensor w_gpu = sixteen ? kernels::store_as(t, to_device(w)) : to_device(w);
      Tensor dx_gpu = to_device(dx0), dw_gpu = to_device(dw0), db_gpu = to_device(db0);
      kernels::linear_backward(to_device(dy), to_device(x), w_gpu, dx_gpu, dw_gpu, db_gpu, t, true, true);
      Tensor* r = results[sixteen];
      r[0] = to_host(dx_gpu), r[1] = to_host(dw_gpu), r[2] = to_host(db_gpu);
    }
    const Tensor* r16 = results[1];
    EXPECT_TRUE(all_close(r16[0], dx, 0.0f, sum_tol(out))) << "dx vs the CPU";
    EXPECT_TRUE(all_close(r16[1], dw, 0.0f, sum_tol(rows))) << "dw vs the CPU";
    EXPECT_TRUE(same_bits(r16[2], db)) << "db vs the CPU";
    EXPECT_TRUE(all_close(r16[0], results[0][0], 0.0f, sum_tol(out))) << "dx vs fp32 buffers";
    EXPECT_TRUE(all_close(r16[1], results[0][1], 0.0f, sum_tol(rows))) << "dw vs fp32 buffers";
    EXPECT_TRUE(same_bits(r16[2], results[0][2])) << "db vs fp32 buffers";
  }
}

// Only some of dx, dw, db wanted (the zero-bubble schedule's split backward): each is still the CPU's,
// and nothing is written for the missing ones.
TEST_F(CudaLinear16Bit, BackwardLeavesOutUndefinedGradients) {
  const int64_t rows = 23, in = 41, out = 17;
  const DType t = DType::BF16;
  const Tensor x = random({rows, in}, 10), w = rounded(t, random({out, in}, 11)), dy = random({rows, out}, 12);
  const Tensor w16 = kernels::store_as(t, to_device(w));
  for (int missing = 0; missing < 3; ++missing) {
    SCOPED_TRACE(missing);
    Tensor dx = random({rows, in}, 13), dw = random({out, in}, 14), db = random({out}, 15);
    Tensor dx_gpu = to_device(dx), dw_gpu = to_device(dw), db_gpu = to_device(db);
    const Tensor held_dx = dx.clone(), held_dw = dw.clone(), held_db = db.clone();
    kernels::linear_backward(to_device(dy), to_device(x), w16, missing == 0 ? Tensor() : dx_gpu,
                             missing == 1 ? Tensor() : dw_gpu, missing == 2 ? Tensor() : db_gpu, t, false, true);
    kernels::linear_backward(dy, x, w, missing == 0 ? Tensor() : dx, missing == 1 ? Tensor() : dw,
                             missing == 2 ? Tensor() : db, t, false, true);
    if (missing == 0) EXPECT_TRUE(same_bits(to_host(dx_gpu), held_dx));
    else EXPECT_TRUE(all_close(to_host(dx_gpu), dx, 0.0f, sum_tol(out)));
    if (missing == 1) EXPECT_TRUE(same_bits(to_host(dw_gpu), held_dw));
    else EXPECT_TRUE(all_close(to_host(dw_gpu), dw, 0.0f, sum_tol(rows)));
    if (missing == 2) EXPECT_TRUE(same_bits(to_host(db_gpu), held_db));
    else EXPECT_TRUE(same_bits(to_host(db_gpu), db));
  }
}

// Views at odd 4-byte offsets of flat buffers (parameters, row ranges): the 16-bit encodings are dense
// buffers of their own, the bias and the fp32 outputs stay views.
TEST_F(CudaLinear16Bit, ViewsAtOddOffsetsMatchTheCpu) {
  const int64_t rows = 19, in = 45, out = 23;
  const DType t = DType::BF16;
  for (int64_t shift : {1, 2, 3}) {
    SCOPED_TRACE(shift);
    const Tensor values = random({shift + out * in + out}, 16), acts = random({shift + rows * in}, 17);
    const Tensor w = values.flat_range(shift, out * in).view({out, in}), b = values.flat_range(shift + out * in, out);
    const Tensor x = acts.flat_range(shift, rows * in).view({rows, in});
    const Tensor values_gpu = to_device(values), acts_gpu = to_device(acts);
    const Tensor w_gpu = values_gpu.flat_range(shift, out * in).view({out, in});
    const Tensor b_gpu = values_gpu.flat_range(shift + out * in, out);
    const Tensor x_gpu = acts_gpu.flat_range(shift, rows * in).view({rows, in});
    Tensor y_buf = Tensor::zeros({shift + rows * out}, DType::F32, Device::cpu()), y_buf_gpu = to_device(y_buf);
    kernels::linear_forward(x_gpu, w_gpu, b_gpu, y_buf_gpu.flat_range(shift, rows * out).view({rows, out}), t);
    kernels::linear_forward(x, w, b, y_buf.flat_range(shift, rows * out).view({rows, out}), t);
    EXPECT_TRUE(all_close(to_host(y_buf_gpu), y_buf, 0.0f, sum_tol(in)));
  }
}

// A 16-bit input of another type than the GEMM's is refused, naming both.
TEST_F(CudaLinear16Bit, RefusesAnInputOfAnotherType) {
  const Tensor x = to_device(random({4, 8}, 18)), w16 = kernels::store_as(DType::F16, to_device(random({3, 8}, 19)));
  Tensor y = to_device(Tensor::zeros({4, 3}, DType::F32, Device::cpu()));
  try {
    kernels::linear_forward(x, w16, Tensor(), y, DType::BF16);
    FAIL() << "an fp16 weight multiplied as bf16 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("of type fp16 multiplied as bf16"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera::cuda
