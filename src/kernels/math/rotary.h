// RoPE of one (x_i, x_{i + rot_dim/2}) pair in Megatron's rotate_half layout, shared by the CPU kernel
// (kernels/rotary.cc) and a GPU's. The angles are formed in double (inv_freq and position * inv_freq)
// and only cos/sin are rounded to float: at position 4096 an angle rounded to float is already off by
// ~2e-4 rad.
#pragma once

#include <math.h>  // the C functions, which device code has too

#include <cstdint>

#include "core/check.h"
#include "core/host_device.h"

namespace tessera::kernels::math {

// The check of rot_dim against head_dim, on the host (the CPU and the CUDA kernels make the same).
inline void check_rope_dims(int64_t rot_dim, int64_t head_dim) {
  TESSERA_CHECK(rot_dim > 0 && rot_dim % 2 == 0 && rot_dim <= head_dim, "rope: rot_dim ", rot_dim,
                " must be even, positive and <= head_dim ", head_dim);
}

// How a model stretches RoPE past the context it was trained at: only the frequencies change, never the
// rotation, so the kernels take this with the base. Linear (Hugging Face's "linear", Megatron's
// --rotary-seq-len-interpolation-factor): every frequency / factor. Llama 3.x ("llama3", Megatron's
// --use-rope-scaling): wavelengths longer than original_max_position / low_freq_factor are divided by
// factor, those shorter than original_max_position / high_freq_factor kept, and the band between
// interpolated smoothly (Megatron's _apply_scaling, Hugging Face's _compute_llama3_parameters). YaRN
// (Peng et al. 2023; Megatron's YarnRotaryEmbedding, DeepSeek-V2/V3's rope): pair i's frequency is
// base^(-2i/dim) / factor below the ramp, unscaled above it, and linear in between, the ramp running over
// the pairs [low, high] that make between beta_fast and beta_slow turns in original_max_position
// positions (rounded outwards, as Megatron's correction_range_round_to_int). YaRN's attention factor
// (mscale) is not a frequency: its caller scales the rotated vectors (model/multi_latent_attention.h).
enum class RopeScalingType : int32_t { kNone = 0, kLinear = 1, kLlama3 = 2, kYarn = 3 };
struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position = 8192.0;
  double beta_fast = 32.0, beta_slow = 1.0;  // YaRN's
};

// YaRN: the (fractional) pair index at which a frequency makes `turns` turns over the original context.
TESSERA_HOST_DEVICE inline double yarn_correction_dim(double turns, int64_t dim, float base, double original) {
  const double pi = 3.14159265358979323846;
  return static_cast<double>(dim) * log(original / (turns * 2.0 * pi)) / (2.0 * log(static_cast<double>(base)));
}

// YaRN's weight of the unscaled frequency of pair i (1: kept, 0: divided by factor).
TESSERA_HOST_DEVICE inline double yarn_keep_weight(int64_t i, int64_t dim, float base, const RopeScaling& s) {
  double low = floor(yarn_correction_dim(s.beta_fast, dim, base, s.original_max_position));
  double high = ceil(yarn_correction_dim(s.beta_slow, dim, base, s.original_max_position));
  low = low > 0 ? low : 0;
  high = high < static_cast<double>(dim - 1) ? high : static_cast<double>(dim - 1);
  if (low == high) high += 0.001;
  double ramp = (static_cast<double>(i) - low) / (high - low);
  ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
  return 1.0 - ramp;
}

// YaRN's mscale of a scaling factor: 0.1 * mscale * ln(factor) + 1 (1 for factor <= 1).
inline double yarn_get_mscale(double factor, double mscale) {
  return factor <= 1 ? 1.0 : 0.1 * mscale * log(factor) + 1.0;
}

// The scaled frequency of an unscaled one, in double as the rest.
TESSERA_HOST_DEVICE inline double rope_scale_inv_freq(double inv_freq, const RopeScaling& s) {
  if (s.type == RopeScalingType::kLinear) return inv_freq / s.factor;
  if (s.type != RopeScalingType::kLlama3) return inv_freq;
  const double pi = 3.14159265358979323846;
  const double wavelen = 2.0 * pi / inv_freq;
  const double low_freq_wavelen = s.original_max_position / s.low_freq_factor;
  const double high_freq_wavelen = s.original_max_position / s.high_freq_factor;
  if (wavelen > low_freq_wavelen) return inv_freq / s.factor;  // low frequencies: interpolated
  if (wavelen < high_freq_wavelen) return inv_freq;            // high frequencies: kept
  const double smooth =
      (s.original_max_position / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return (1.0 - smooth) * inv_freq / s.factor + smooth * inv_freq;
}

// base^(-2i / rot_dim), the frequency of pair i, scaled.
TESSERA_HOST_DEVICE inline double rope_inv_freq(int64_t i, int64_t rot_dim, float base, const RopeScaling& s = {}) {
  if (s.type == RopeScalingType::kYarn) {
    const double extra = pow(static_cast<double>(base), -2.0 * static_cast<double>(i) / static_cast<double>(rot_dim));
    const double keep = yarn_keep_weight(i, rot_dim, base, s);
    return extra / s.factor * (1.0 - keep) + extra * keep;
  }
  return rope_scale_inv_freq(
      pow(static_cast<double>(base), -2.0 * static_cast<double>(i) / static_cast<double>(rot_dim)), s);
}

// cos and sin of position * inv_freq, as floats; sign -1 gives the sine of the backward (transposed)
// rotation.
TESSERA_HOST_DEVICE inline void rope_cos_sin(double position, double inv_freq, double sign, float& c, float& s) {
  double angle = position * inv_freq;
  c = static_cast<float>(cos(angle));
  s = static_cast<float>(sign * sin(angle));
}

// Rotates (a, b) = (x_i, x_{i+half}) by the angle whose cos and sin are c and s.
TESSERA_HOST_DEVICE inline void rope_rotate_pair(float& a, float& b, float c, float s) {
  float x = a, y = b;
  a = x * c - y * s;
  b = y * c + x * s;
}

// The rotation is orthogonal, so its transpose (the backward) is the rotation by -angle: the same
// arithmetic with the sine negated, as the CPU kernel forms it (rope_cos_sin with sign -1).
TESSERA_HOST_DEVICE inline void rope_rotate_pair_backward(float& da, float& db, float c, float s) {
  rope_rotate_pair(da, db, c, -s);
}

}  // namespace tessera::kernels::math
