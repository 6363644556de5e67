// The CUDA LayerNorm and RMSNorm (kernels/cuda/norms.cu) through the tensor entry points, on tensors on
// cuda:0, against the CPU kernels on the same random inputs, forward (fp32 and rounded outputs, alone and
// after a residual add) and backward (one kernel for dx and the chunks' partial dw and db, accumulated
// into what they held), over row and column counts including odd ones
// and more rows than one chunk of the weight gradients' column sums (kernels/math/column_sums.h), with a
// ragged last one: dw and db bit for bit, the same order as the CPU's; and the 16-bit outputs the GPU's
// 16-bit GEMM buffers read. Skipped, with CUDA's reason, where no GPU is present.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <utility>

#include "core/check.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "kernels/cuda/device_testing.h"
#include "kernels/norms.h"
#include "kernels/precision.h"

namespace tessera::cuda {
namespace {

using namespace testing;
using CudaNorms = CudaKernelTest;

// The backward kernel keeps a chunk's partial weight gradients in shared memory: within the default 48 KiB
// less its 512 static bytes (up to 6080 columns with db), above it by opting in (6144 and 8191 with db:
// 6144's 48 KiB of partials and RMSNorm's 12288 columns once failed to launch, their static bytes not
// counted; 40000 without db), and past what the device allows in global memory instead (40000 with db;
// RMSNorm's 70000).
const std::pair<int64_t, int64_t> kShapes[] = {{1, 1},      {3, 7},     {17, 130},  {64, 768},   {5, 1031},
                                               {300, 4099}, {2085, 67}, {9, 6080},  {9, 6144},   {5, 12288},
                                               {33, 8191},  {40, 40000}, {3, 70000}};
// Row statistics are double on both; dx is fp32 arithmetic whose fused multiply-adds differ. dw and db are
// the same bits.
constexpr float kTol = 2e-5f;
float rounded_tol(DType t) { return t == DType::BF16 ? 8e-3f : t == DType::F16 ? 1e-3f : kTol; }

TEST_F(CudaNorms, LayerNormMatchesTheCpu) {
  for (auto [rows, cols] : kShapes) {
    SCOPED_TRACE(::testing::Message() << rows << "x" << cols);
    // An offset mean, as residual streams have: the two-pass variance must hold up.
    const Tensor x = random({rows, cols}, 1, 2.0f, 5.0f), w = random({cols}, 2), b = random({cols}, 3);
    for (DType t : {DType::F32, DType::BF16, DType::F16}) {
      for (bool bias : {true, false}) {
        Tensor y = Tensor::empty({rows, cols}), mean = Tensor::empty({rows}), rstd = Tensor::empty({rows});
        Tensor y_gpu = to_device(y), mean_gpu = to_device(mean), rstd_gpu = to_device(rstd);
        kernels::layernorm_forward(to_device(x), to_device(w), bias ? to_device(b) : Tensor(), y_gpu, mean_gpu,
                                   rstd_gpu, 1e-5f, t);
        kernels::layernorm_forward(x, w, bias ? b : Tensor(), y, mean, rstd, 1e-5f, t);
        EXPECT_TRUE(all_close(to_host(y_gpu), y, rounded_tol(t), 1e-5f)) << dtype_name(t) << " bias " << bias;
        EXPECT_TRUE(all_close(to_host(mean_gpu), mean, 1e-6f, 0.0f));  // an ulp where the double sums round apart
        EXPECT_TRUE(all_close(to_host(rstd_gpu), rstd, 1e-6f, 0.0f));
      }
    }
    Tensor y = Tensor::empty({rows, cols}), mean = Tensor::empty({rows}), rstd = Tensor::empty({rows});
    kernels::layernorm_forward(x, w, b, y, mean, rstd, 1e-5f);
    const Tensor dy = random({rows, cols}, 4);
    for (bool with_db : {true, false}) {
      Tensor dx = random({rows, cols}, 5), dw = random({cols}, 6), db = random({cols}, 7);
      Tensor dx_gpu = to_device(dx), dw_gpu = to_device(dw), db_gpu = to_device(db);
      kernels::layernorm_backward(to_device(dy), to_device(x), to_device(w), to_device(mean), to_device(rstd), dx_gpu,
                                  dw_gpu, with_db ? db_gpu : Tensor());
      kernels::layernorm_backward(dy, x, w, mean, rstd, dx, dw, with_db ? db : Tensor());
      EXPECT_TRUE(all_close(to_host(dx_gpu), dx, kTol, 1e-5f)) << "dx";
      EXPECT_TRUE(same_bits(to_host(dw_gpu), dw)) << "dw";
      EXPECT_TRUE(same_bits(to_host(db_gpu), db)) << "db";  // untouched when left out
    }
  }
}

TEST_F(CudaNorms, RmsNormMatchesTheCpu) {
  for (auto [rows, cols] : kShapes) {
    SCOPED_TRACE(::testing::Message() << rows << "x" << cols);
    const Tensor x = random({rows, cols}, 8, -3.0f, 3.0f), w = random({cols}, 9);
    for (DType t : {DType::F32, DType::BF16, DType::F16}) {
      Tensor y = Tensor::empty({rows, cols}), rstd = Tensor::empty({rows});
      Tensor y_gpu = to_device(y), rstd_gpu = to_device(rstd);
      kernels::rmsnorm_forward(to_device(x), to_device(w), y_gpu, rstd_gpu, 1e-6f, t);
      kernels::rmsnorm_forward(x, w, y, rstd, 1e-6f, t);
      EXPECT_TRUE(all_close(to_host(y_gpu), y, rounded_tol(t), 1e-5f)) << dtype_name(t);
      EXPECT_TRUE(all_close(to_host(rstd_gpu), rstd, 1e-6f, 0.0f));
    }
    Tensor y = Tensor::empty({rows, cols}), rstd = Tensor::empty({rows});
    kernels::rmsnorm_forward(x, w, y, rstd, 1e-6f);
    const Tensor dy = random({rows, cols}, 10);
    Tensor dx = random({rows, cols}, 11), dw = random({cols}, 12);
    Tensor dx_gpu = to_device(dx), dw_gpu = to_device(dw);
    kernels::rmsnorm_backward(to_device(dy), to_device(x), to_device(w), to_device(rstd), dx_gpu, dw_gpu);
    kernels::rmsnorm_backward(dy, x, w, rstd, dx, dw);
    EXPECT_TRUE(all_close(to_host(dx_gpu), dx, kTol, 1e-5f)) << "dx";
    EXPECT_TRUE(same_bits(to_host(dw_gpu), dw)) << "dw";
  }
}

// x += residual then the norm, in one kernel: the sum the same bits as the CPU's (one fp32 add), the
// outputs as the plain forward's.
TEST_F(CudaNorms, ResidualNormsMatchTheCpu) {
  for (auto [rows, cols] : kShapes) {
    SCOPED_TRACE(::testing::Message() << rows << "x" << cols);
    const Tensor x0 = random({rows, cols}, 16, 2.0f, 5.0f), res = random({rows, cols}, 17);
    const Tensor w = random({cols}, 18), b = random({cols}, 19);
    for (DType t : {DType::F32, DType::BF16}) {
      Tensor x = x0.clone(), y = Tensor::empty({rows, cols});
      Tensor mean = Tensor::empty({rows}), rstd = Tensor::empty({rows});
      Tensor x_gpu = to_device(x0), y_gpu = to_device(y), mean_gpu = to_device(mean), rstd_gpu = to_device(rstd);
      kernels::residual_layernorm_forward(x_gpu, to_device(res), to_device(w), to_device(b), y_gpu, mean_gpu, rstd_gpu,
                                          1e-5f, t);
      kernels::residual_layernorm_forward(x, res, w, b, y, mean, rstd, 1e-5f, t);
      EXPECT_TRUE(same_bits(to_host(x_gpu), x)) << "LayerNorm's residual sum";
      EXPECT_TRUE(all_close(to_host(y_gpu), y, rounded_tol(t), 1e-5f)) << dtype_name(t);
      EXPECT_TRUE(all_close(to_host(mean_gpu), mean, 1e-6f, 0.0f));
      EXPECT_TRUE(all_close(to_host(rstd_gpu), rstd, 1e-6f, 0.0f));

      Tensor xr = x0.clone(), xr_gpu = to_device(x0), yr_gpu = to_device(y), rstdr_gpu = to_device(rstd);
      kernels::residual_rmsnorm_forward(xr_gpu, to_device(res), to_device(w), yr_gpu, rstdr_gpu, 1e-6f, t);
      kernels::residual_rmsnorm_forward(xr, res, w, y, rstd, 1e-6f, t);
      EXPECT_TRUE(same_bits(to_host(xr_gpu), xr)) << "RMSNorm's residual sum";
      EXPECT_TRUE(all_close(to_host(yr_gpu), y, rounded_tol(t), 1e-5f)) << dtype_name(t);
      EXPECT_TRUE(all_close(to_host(rstdr_gpu), rstd, 1e-6f, 0.0f));
    }
  }
}

// A 16-bit y (bf16 activations, the pre-LN norms' outputs): each forward writes the encodings of the
// values it writes into an fp32 y rounded to that type, bit for bit, so they are the CPU's rounded values
// wherever the fp32 outputs agree (the double row sums may round an ulp apart: within the rounding's
// tolerance of the CPU's); a 16-bit y of another type than round_output is refused.
TEST_F(CudaNorms, SixteenBitOutputsAreTheRoundedOutputsEncoded) {
  for (auto [rows, cols] : kShapes) {
    SCOPED_TRACE(::testing::Message() << rows << "x" << cols);
    const Tensor x = random({rows, cols}, 20, 2.0f, 5.0f), res = random({rows, cols}, 21);
    const Tensor w = to_device(random({cols}, 22)), b = to_device(random({cols}, 23));
    for (DType t : {DType::BF16, DType::F16}) {
      SCOPED_TRACE(dtype_name(t));
      // run(x, y) once into an fp32 y and once into a 16-bit one, each from a fresh copy of x (the
      // residual forms add into it); returns the 16-bit output widened, on the host.
      auto both = [&](const char* what, const std::function<void(const Tensor&, const Tensor&)>& run) {
        const Tensor y32 = Tensor::empty({rows, cols}, DType::F32, kGpu), y16 = Tensor::empty({rows, cols}, t, kGpu);
        run(to_device(x), y32);
        run(to_device(x), y16);
        EXPECT_EQ(y16.dtype(), t);
        EXPECT_TRUE(same_bits(to_host(y16), to_host(kernels::store_as(t, y32)))) << what;
        return to_host(kernels::to_fp32(y16));
      };
      const Tensor mean = Tensor::empty({rows}, DType::F32, kGpu), rstd = Tensor::empty({rows}, DType::F32, kGpu);
      const Tensor ln = both("layernorm", [&](const Tensor& xg, const Tensor& y) {
        kernels::layernorm_forward(xg, w, b, y, mean, rstd, 1e-5f, t);
      });
      const Tensor rms = both("rmsnorm", [&](const Tensor& xg, const Tensor& y) {
        kernels::rmsnorm_forward(xg, w, y, rstd, 1e-6f, t);
      });
      both("residual layernorm", [&](const Tensor& xg, const Tensor& y) {
        kernels::residual_layernorm_forward(xg, to_device(res), w, b, y, mean, rstd, 1e-5f, t);
      });
      both("residual rmsnorm", [&](const Tensor& xg, const Tensor& y) {
        kernels::residual_rmsnorm_forward(xg, to_device(res), w, y, rstd, 1e-6f, t);
      });
      Tensor y = Tensor::empty({rows, cols}), m = Tensor::empty({rows}), r = Tensor::empty({rows});
      kernels::layernorm_forward(x, to_host(w), to_host(b), y, m, r, 1e-5f, t);
      EXPECT_TRUE(all_close(ln, y, rounded_tol(t), 1e-5f)) << "layernorm against the CPU";
      kernels::rmsnorm_forward(x, to_host(w), y, r, 1e-6f, t);
      EXPECT_TRUE(all_close(rms, y, rounded_tol(t), 1e-5f)) << "rmsnorm against the CPU";
    }
  }
  const Tensor x = to_device(random({3, 7}, 24)), w = to_device(random({7}, 25));
  const Tensor y = Tensor::empty({3, 7}, DType::BF16, kGpu), rstd = Tensor::empty({3}, DType::F32, kGpu);
  EXPECT_THROW(kernels::rmsnorm_forward(x, w, y, rstd, 1e-6f, DType::F32), Error);
  EXPECT_THROW(kernels::rmsnorm_forward(x, w, y, rstd, 1e-6f, DType::F16), Error);
}

// The weight gradients are sums over rows in a fixed order: the same inputs give the same bits.
TEST_F(CudaNorms, WeightGradientsAreDeterministic) {
  const int64_t rows = 513, cols = 257;
  const Tensor x = to_device(random({rows, cols}, 13)), w = to_device(random({cols}, 14));
  const Tensor dy = to_device(random({rows, cols}, 15));
  Tensor y = to_device(Tensor::zeros({rows, cols})), mean = to_device(Tensor::zeros({rows}));
  Tensor rstd = to_device(Tensor::zeros({rows}));
  kernels::layernorm_forward(x, w, Tensor(), y, mean, rstd, 1e-5f);
  Tensor first;
  for (int run = 0; run < 3; ++run) {
    Tensor dx = to_device(Tensor::zeros({rows, cols})), dw = to_device(Tensor::zeros({cols}));
    Tensor db = to_device(Tensor::zeros({cols}));
    kernels::layernorm_backward(dy, x, w, mean, rstd, dx, dw, db);
    if (run == 0) first = to_host(dw);
    EXPECT_TRUE(same_bits(to_host(dw), first)) << run;
  }
}

}  // namespace
}  // namespace tessera::cuda
