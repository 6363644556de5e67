// The CUDA linear layer (kernels/cuda/linear.h: cuBLASLt GEMMs and a bias-gradient kernel) through the
// tensor entry points, on tensors on cuda:0, against the CPU on the same random inputs: forward with and
// without a bias, backward with dx overwritten and dw, db accumulated into what they held, any of them
// left out, fp32 and 16-bit input types (with inputs promised already rounded too), over odd sizes.
// Skipped, with CUDA's reason, where no GPU is present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <tuple>

#include "core/dtype.h"
#include "core/tensor.h"
#include "kernels/cuda/device_testing.h"
#include "kernels/linear.h"
#include "kernels/precision.h"

namespace tessera::cuda {
namespace {

using namespace testing;
using CudaLinear = CudaKernelTest;

// rows, in, out.
const std::tuple<int64_t, int64_t, int64_t> kShapes[] = {{1, 1, 1},     {3, 7, 5},     {17, 33, 65},
                                                         {64, 130, 257}, {5, 1031, 3}, {301, 96, 129}};

// The tolerance kernels_gemm_cublaslt_test allows a product of inner dimension k: fp32 sums in another
// order; 16-bit inputs (rounded alike on both) accumulate in another order too, with cuBLASLt's 16-bit
// kernels allowed more slack.
float gemm_tol(DType input_type, int64_t k) {
  return static_cast<float>((input_type == DType::F32 ? 1e-5 : 1e-2) * (1.0 + std::sqrt(static_cast<double>(k))));
}

Tensor rounded(DType t, const Tensor& x) {
  Tensor r = Tensor::empty(x.shape());
  kernels::round_to(t, x, r);
  return r;
}

TEST_F(CudaLinear, ForwardMatchesTheCpu) {
  for (auto [rows, in, out] : kShapes) {
    SCOPED_TRACE(::testing::Message() << rows << "x" << in << " -> " << out);
    const Tensor x = random({rows, in}, 1), w = random({out, in}, 2), b = random({out}, 3);
    for (DType t : {DType::F32, DType::BF16, DType::F16}) {
      for (bool bias : {true, false}) {
        Tensor y = random({rows, out}, 4), y_gpu = to_device(y);  // overwritten, whatever it held
        kernels::linear_forward(to_device(x), to_device(w), bias ? to_device(b) : Tensor(), y_gpu, t);
        kernels::linear_forward(x, w, bias ? b : Tensor(), y, t);
        EXPECT_TRUE(all_close(to_host(y_gpu), y, 0.0f, gemm_tol(t, in))) << dtype_name(t) << " bias " << bias;
      }
    }
  }
}

// x of any shape of rows * in elements, and inputs the caller promises are rounded already.
TEST_F(CudaLinear, ForwardTakesRowsOfAnyShapeAndRoundedInputs) {
  const Tensor x = rounded(DType::BF16, random({3, 5, 37}, 5)), w = rounded(DType::BF16, random({19, 37}, 6));
  const Tensor b = random({19}, 7);
  Tensor y = Tensor::empty({3, 5, 19}), y_gpu = to_device(y);
  kernels::linear_forward(to_device(x), to_device(w), to_device(b), y_gpu, DType::BF16, true, true);
  kernels::linear_forward(x, w, b, y, DType::BF16, true, true);
  EXPECT_TRUE(all_close(to_host(y_gpu), y, 0.0f, gemm_tol(DType::BF16, 37)));
}

TEST_F(CudaLinear, BackwardMatchesTheCpu) {
  for (auto [rows, in, out] : kShapes) {
    SCOPED_TRACE(::testing::Message() << rows << "x" << in << " -> " << out);
    const Tensor x = random({rows, in}, 8), w = random({out, in}, 9), dy = random({rows, out}, 10);
    for (DType t : {DType::F32, DType::BF16}) {
      // dx held values before (it is overwritten); dw and db too (they are accumulated into).
      Tensor dx = random({rows, in}, 11), dw = random({out, in}, 12), db = random({out}, 13);
      Tensor dx_gpu = to_device(dx), dw_gpu = to_device(dw), db_gpu = to_device(db);
      kernels::linear_backward(to_device(dy), to_device(x), to_device(w), dx_gpu, dw_gpu, db_gpu, t);
      kernels::linear_backward(dy, x, w, dx, dw, db, t);
      EXPECT_TRUE(all_close(to_host(dx_gpu), dx, 0.0f, gemm_tol(t, out))) << dtype_name(t) << " dx";
      EXPECT_TRUE(all_close(to_host(dw_gpu), dw, 0.0f, gemm_tol(t, rows))) << dtype_name(t) << " dw";
      // The same column sums in the same order as the CPU's (kernels/math/column_sums.h).
      EXPECT_TRUE(same_bits(to_host(db_gpu), db)) << dtype_name(t) << " db";
    }
  }
}

// Each of dx, dw, db left out: the others are still right and nothing is written for the missing one.
TEST_F(CudaLinear, BackwardLeavesOutUndefinedGradients) {
  const int64_t rows = 23, in = 41, out = 17;
  const Tensor x = random({rows, in}, 14), w = random({out, in}, 15), dy = random({rows, out}, 16);
  for (int missing = 0; missing < 3; ++missing) {
    SCOPED_TRACE(missing);
    Tensor dx = random({rows, in}, 17), dw = random({out, in}, 18), db = random({out}, 19);
    Tensor dx_gpu = to_device(dx), dw_gpu = to_device(dw), db_gpu = to_device(db);
    const Tensor held_dx = to_host(dx_gpu), held_dw = to_host(dw_gpu), held_db = to_host(db_gpu);
    kernels::linear_backward(to_device(dy), to_device(x), to_device(w), missing == 0 ? Tensor() : dx_gpu,
                             missing == 1 ? Tensor() : dw_gpu, missing == 2 ? Tensor() : db_gpu);
    kernels::linear_backward(dy, x, w, missing == 0 ? Tensor() : dx, missing == 1 ? Tensor() : dw,
                             missing == 2 ? Tensor() : db);
    if (missing == 0) EXPECT_TRUE(same_bits(to_host(dx_gpu), held_dx));
    else EXPECT_TRUE(all_close(to_host(dx_gpu), dx, 0.0f, gemm_tol(DType::F32, out)));
    if (missing == 1) EXPECT_TRUE(same_bits(to_host(dw_gpu), held_dw));
    else EXPECT_TRUE(all_close(to_host(dw_gpu), dw, 0.0f, gemm_tol(DType::F32, rows)));
    if (missing == 2) EXPECT_TRUE(same_bits(to_host(db_gpu), held_db));
    else EXPECT_TRUE(same_bits(to_host(db_gpu), db));
  }
}

// Inputs promised already rounded (the output layer's dlogits, weights rounded once per step) give the
// CPU's results too.
TEST_F(CudaLinear, BackwardWithRoundedInputsMatchesTheCpu) {
  const int64_t rows = 37, in = 70, out = 29;
  const Tensor x = rounded(DType::BF16, random({rows, in}, 20)), w = rounded(DType::BF16, random({out, in}, 21));
  const Tensor dy = rounded(DType::BF16, random({rows, out}, 22));
  Tensor dx = Tensor::empty({rows, in}), dw = random({out, in}, 23), db = random({out}, 24);
  Tensor dx_gpu = to_device(dx), dw_gpu = to_device(dw), db_gpu = to_device(db);
  kernels::linear_backward(to_device(dy), to_device(x), to_device(w), dx_gpu, dw_gpu, db_gpu, DType::BF16, true, true,
                           true);
  kernels::linear_backward(dy, x, w, dx, dw, db, DType::BF16, true, true, true);
  EXPECT_TRUE(all_close(to_host(dx_gpu), dx, 0.0f, gemm_tol(DType::BF16, out)));
  EXPECT_TRUE(all_close(to_host(dw_gpu), dw, 0.0f, gemm_tol(DType::BF16, rows)));
  EXPECT_TRUE(same_bits(to_host(db_gpu), db));
}

// Parameters are views into one flat buffer (model::ParameterSet) and activations may be row ranges, at
// any 4-byte offset: the GEMMs must not assume cuBLASLt's default 256-byte alignment, nor the bias
// epilogue a 16-byte aligned bias.
TEST_F(CudaLinear, ViewsAtOddOffsetsMatchTheCpu) {
  const int64_t rows = 19, in = 45, out = 23;
  for (int64_t shift : {1, 2, 3, 4}) {
    SCOPED_TRACE(shift);
    // Each buffer starts with `shift` floats before its views: values [w][b], grads [dw][db], acts [x],
    // douts [dy], and below y and dx.
    const Tensor values = random({shift + out * in + out}, 30), grads = random({shift + out * in + out}, 31);
    const Tensor acts = random({shift + rows * in}, 32), douts = random({shift + rows * out}, 33);
    auto views = [&](const Tensor& v, const Tensor& g, const Tensor& a, const Tensor& d) {
      return std::tuple{v.flat_range(shift, out * in).view({out, in}), v.flat_range(shift + out * in, out),
                        g.flat_range(shift, out * in).view({out, in}), g.flat_range(shift + out * in, out),
                        a.flat_range(shift, rows * in).view({rows, in}),
                        d.flat_range(shift, rows * out).view({rows, out})};
    };
    const Tensor values_gpu = to_device(values), grads_gpu = to_device(grads);
    const Tensor acts_gpu = to_device(acts), douts_gpu = to_device(douts);
    auto [w, b, dw, db, x, dy] = views(values, grads, acts, douts);
    auto [w_gpu, b_gpu, dw_gpu, db_gpu, x_gpu, dy_gpu] = views(values_gpu, grads_gpu, acts_gpu, douts_gpu);
    for (DType t : {DType::F32, DType::BF16}) {
      Tensor y_buf = Tensor::zeros({shift + rows * out}), y_buf_gpu = to_device(y_buf);
      const Tensor y = y_buf.flat_range(shift, rows * out).view({rows, out});
      const Tensor y_gpu = y_buf_gpu.flat_range(shift, rows * out).view({rows, out});
      kernels::linear_forward(x_gpu, w_gpu, b_gpu, y_gpu, t);
      kernels::linear_forward(x, w, b, y, t);
      EXPECT_TRUE(all_close(to_host(y_buf_gpu), y_buf, 0.0f, gemm_tol(t, in))) << dtype_name(t) << " y";
    }
    Tensor dx_buf = Tensor::zeros({shift + rows * in}), dx_buf_gpu = to_device(dx_buf);
    kernels::linear_backward(dy_gpu, x_gpu, w_gpu, dx_buf_gpu.flat_range(shift, rows * in).view({rows, in}), dw_gpu,
                             db_gpu);
    kernels::linear_backward(dy, x, w, dx_buf.flat_range(shift, rows * in).view({rows, in}), dw, db);
    EXPECT_TRUE(all_close(to_host(dx_buf_gpu), dx_buf, 0.0f, gemm_tol(DType::F32, out))) << "dx";
    EXPECT_TRUE(all_close(to_host(grads_gpu), grads, 0.0f, gemm_tol(DType::F32, rows))) << "dw, db";
  }
}

// The bias gradient sums in a fixed order: the same inputs give the same bits, run after run.
TEST_F(CudaLinear, BiasGradientIsDeterministic) {
  const int64_t rows = 4099, in = 8, out = 300;
  const Tensor x = to_device(random({rows, in}, 25)), w = to_device(random({out, in}, 26));
  const Tensor dy = to_device(random({rows, out}, 27));
  Tensor first;
  for (int run = 0; run < 3; ++run) {
    Tensor db = to_device(Tensor::zeros({out}));
    kernels::linear_backward(dy, x, w, Tensor(), Tensor(), db);
    if (run == 0) first = to_host(db);
    EXPECT_TRUE(same_bits(to_host(db), first)) << run;
  }
}

}  // namespace
}  // namespace tessera::cuda
