// Python's round() of a float to an int: half to even (round(4.5) == 4, round(5.5) == 6), which is
// nearbyint under the default rounding mode. Megatron's Python code rounds this way (split boundaries,
// BERT's mask counts); its helpers.cpp is C++ and rounds half away from zero, so code that transcribes
// helpers.cpp uses std::round instead.
#pragma once

#include <cmath>
#include <cstdint>

namespace tessera::data {

inline int64_t python_round(double x) { return static_cast<int64_t>(std::nearbyint(x)); }

}  // namespace tessera::data
