// NumPy's legacy random state, `numpy.random.RandomState(seed)`, reproduced bit for bit for the
// things Megatron-LM's datasets use it for: MT19937 seeded with a 32-bit integer, `shuffle` of a
// 1-D array (or a list), `random()` and `randint`. Megatron shuffles its document and sample indices
// with it and draws BERT's masking from it, so the same seed gives the same samples as Megatron.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <utility>

namespace tessera::data {

class NumpyRandomState {
 public:
  // np.random.RandomState(seed): an integer seed goes through MT19937's init_genrand (NumPy's
  // mt19937_seed), not init_by_array.
  explicit NumpyRandomState(uint32_t seed);

  // The next tempered 32-bit output (MT19937.random_raw()).
  uint32_t next_uint32();
  // Two outputs, the first in the high half (NumPy's mt19937_next64).
  uint64_t next_uint64();
  // A uniform integer in [0, max] by masked rejection, NumPy's random_interval: 32-bit draws
  // while max fits 32 bits, else 64-bit draws.
  uint64_t random_interval(uint64_t max);
  // RandomState.random() (random_sample): 53 bits from two draws, (a >> 5) * 2^26 + (b >> 6), over 2^53.
  double random_sample();
  // RandomState.randint(low, high) for high > low (default int64 dtype): low + random_interval(high - 1 - low),
  // which draws nothing when high - low == 1.
  int64_t randint(int64_t low, int64_t high);

  // RandomState.shuffle(x) for a 1-D array: Fisher-Yates from the end, j = random_interval(i).
  // The result does not depend on the element type, as in NumPy.
  template <typename T>
  void shuffle(std::span<T> x) {
    for (size_t i = x.size(); i-- > 1;) {
      const size_t j = static_cast<size_t>(random_interval(i));
      std::swap(x[i], x[j]);
    }
  }

 private:
  void twist();

  std::array<uint32_t, 624> key_{};
  int pos_ = 624;
};

}  // namespace tessera::data
