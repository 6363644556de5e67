// Every header of per-element math shared by the CPU kernels and a GPU's, compiled by nvcc for the
// device (tests/host_device_headers.sh): a kernel calls each function, so a host-only construct in
// any of them (a std:: call device code lacks, an exception, a non-constexpr host function) fails
// the build. The same file built as host code, by nvcc and by g++ (without __CUDACC__), prints the
// functions' values on fixed inputs, which the script compares: one arithmetic on both compilers.
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "core/host_device.h"
#include "core/philox.h"
#include "kernels/math/activations.h"
#include "kernels/math/adamw.h"
#include "kernels/math/column_sums.h"
#include "kernels/math/dropout.h"
#include "kernels/math/moe_routing.h"
#include "kernels/math/rotary.h"
#include "kernels/math/softmax.h"
#include "kernels/vector_math.h"

namespace m = tessera::kernels::math;

// The values of every shared function at input x (and i for the integer ones), into out[0, kValues).
constexpr int kValues = 35;

TESSERA_HOST_DEVICE inline void all_functions(float x, uint64_t i, float* out) {
  out[0] = tessera::kernels::exp_approx(x);
  out[1] = m::gelu_tanh(x);
  out[2] = m::gelu_tanh_backward(x, 0.5f);
  out[3] = m::swiglu(x, 1.25f);
  m::swiglu_backward(x, 1.25f, 0.5f, out[4], out[5]);
  float c, s;
  m::rope_cos_sin(static_cast<double>(i), m::rope_inv_freq(3, 16, 10000.0f), 1.0, c, s);
  float a = x, b = 0.75f;
  m::rope_rotate_pair(a, b, c, s);
  out[6] = a;
  out[7] = b;
  m::rope_rotate_pair_backward(a, b, c, s);
  out[8] = a;
  m::AdamWCoeffs k{0.999f, 1e-3f, 1.2f, 0.9f, 0.1f, 0.95f, 0.05f, 1e-8f, 0.5f};
  float p = 0.25f, mom = 0.01f, var = 0.002f;
  m::adamw_update_one(p, x * k.grad_scale, mom, var, k);
  out[9] = p;
  out[10] = mom;
  out[11] = var;
  const tessera::PhiloxStream rng(42, 7);
  out[12] = rng.uniform(i);
  out[13] = rng.normal(i);
  const uint32_t bits = rng.bits(i);
  out[14] = m::dropout_keeps(bits, 0.3f) ? 1.0f : 0.0f;
  tessera::kernels::DropoutRegion region{4, 2, 8, 1, 16, 3};
  out[15] = static_cast<float>(m::dropout_element(region, 1, 1, 5));
  tessera::kernels::AttentionDropout drop{0.1f, 1, 2, 0, 1, 4};
  out[16] = static_cast<float>(m::attention_dropout_row(drop, 8, 1, 2, 3));
  out[17] = static_cast<float>(tessera::mix_stream(i, 99) >> 40);
  const m::SoftmaxStats st = m::softmax_merge({x, 2.0f}, {1.0f, 3.0f});
  out[18] = st.max;
  out[19] = st.sum;
  out[20] = m::softmax_lse(st.max, st.sum);
  out[21] = m::softmax_rescale(m::softmax_safe_shift(-INFINITY), x) + m::softmax_weight(x, 1.0f);
  out[22] = m::cross_entropy_dlogit(x, 2.0f, 0.5f);
  out[23] = m::cross_entropy_dlogit_target(x, 2.0f, 0.5f);
  out[24] = m::dropout_uniform(bits);
  out[25] = m::router_sigmoid(x);
  out[26] = m::router_sigmoid_grad(x);
  out[27] = m::softmax_grad(0.25f, x, 0.5f);
  out[28] = m::normalised_grad(x, 0.5f, 1.75f);
  out[29] = m::z_loss_dlogit(x, 2.0f, 0.5f);
  out[30] = m::jitter_factor(bits, 0.1f);
  float vals[2];
  int32_t idx[2];
  int64_t have = 0;
  const float scores[4] = {0.5f, x, 0.5f, -x};
  for (int32_t e = 0; e < 4; ++e) m::topk_insert(scores[e], e, 2, have, vals, idx);
  out[31] = static_cast<float>(idx[0] * 4 + idx[1]);
  out[32] = vals[1];
  out[33] = m::norm_weight_grad_term(0.75f, x, 0.3f, 1.7f);
  out[34] = static_cast<float>(m::column_sum_chunks(static_cast<int64_t>(i) * 7));
}

constexpr int kInputs = 9;
TESSERA_HOST_DEVICE inline float input(int j) {
  const float xs[kInputs] = {-20.0f, -3.5f, -1.0f, -0.125f, 0.0f, 0.3f, 1.0f, 4.75f, 30.0f};
  return xs[j];
}

#if defined(__CUDACC__)
__global__ void shared_math_kernel(float* out) {
  const int j = static_cast<int>(threadIdx.x);
  if (j < kInputs) all_functions(input(j), static_cast<uint64_t>(j) * 977u, out + j * kValues);
}
#endif

// Host side: the values as bit patterns, one line per input, for the script to compare.
int main() {
  for (int j = 0; j < kInputs; ++j) {
    float out[kValues];
    all_functions(input(j), static_cast<uint64_t>(j) * 977u, out);
    for (int v = 0; v < kValues; ++v) {
      uint32_t u;
      std::memcpy(&u, &out[v], 4);
      std::printf("%08x%c", u, v + 1 == kValues ? '\n' : ' ');
    }
  }
  return 0;
}
