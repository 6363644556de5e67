// The checks that argument finalisation (arguments*.cc) is written in: a violated rule is an Error
// naming the flag, its value and the rule ("--seq-length=0: must be positive"), so the user knows what to
// change. Internal to train/.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>

#include "core/check.h"

namespace tessera::train::rules {

template <typename T>
void require(bool ok, const char* flag, T value, const std::string& rule) {
  TESSERA_CHECK(ok, flag, "=", value, ": ", rule);
}

template <typename T>
void require_positive(const char* flag, T value) {
  require(value > 0, flag, value, "must be positive");
}

// A positive float that must also be finite: an infinite learning rate or weight decay trains on to
// NaN losses, an infinite epsilon or init std silently makes every output zero or NaN.
template <typename T>
void require_positive_finite(const char* flag, T value) {
  require(std::isfinite(value), flag, value, "must be a finite number");
  require(value > 0, flag, value, "must be positive");
}

// A CLI11 validator of --seed's text. Megatron's _set_random_seed raises "Seed (N) should be a positive
// integer" for N <= 0, and NumPy's RandomState, which shuffles its datasets, takes no seed of 2^32 or
// more. The text is checked because CLI11 converts "-1" for an unsigned option by wrapping it to 2^64 - 1.
inline std::string seed_rule(const std::string& text) {
  uint64_t seed = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), seed);
  if (ec == std::errc() && end == text.data() + text.size() && seed > 0 && seed < (uint64_t{1} << 32)) return "";
  return str_cat(text, " must be a positive integer below 2^32 (as Megatron's _set_random_seed and NumPy's RandomState)");
}

}  // namespace tessera::train::rules
