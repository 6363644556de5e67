#include "data/numpy_random.h"

#include <gtest/gtest.h>

#include <numeric>

#include "data/gpt_dataset_testing.h"

namespace tessera::data {
namespace {

using testing::read_i64;
using testing::run_reference;
using testing::ScratchDir;

// The first outputs of MT19937 seeded with 5489 (the reference implementation's default seed).
TEST(NumpyRandomState, MatchesMersenneTwisterReference) {
  NumpyRandomState rng(5489);
  EXPECT_EQ(rng.next_uint32(), 3499211612u);
  EXPECT_EQ(rng.next_uint32(), 581869302u);
  EXPECT_EQ(rng.next_uint32(), 3890346734u);
}

TEST(NumpyRandomState, RawOutputsMatchNumpy) {
  for (uint32_t seed : {0u, 1u, 1234u, 2024u, 4294967295u}) {
    ScratchDir dir;
    const int count = 3000;  // several twists of the 624-word state
    ASSERT_EQ(run_reference(str_cat("raw --seed ", seed, " --count ", count), dir.path()), "");
    const std::vector<int64_t> expected = read_i64(dir / "raw.i64");
    ASSERT_EQ(expected.size(), static_cast<size_t>(count));
    NumpyRandomState rng(seed);
    for (int i = 0; i < count; ++i) ASSERT_EQ(rng.next_uint32(), expected[i]) << "seed " << seed << " output " << i;
  }
}

// Successive shuffles on one state, as Megatron's document and shuffle indices use it; lengths
// above 2^16 exercise wider rejection masks.
TEST(NumpyRandomState, ShuffleMatchesNumpy) {
  const std::vector<int64_t> lengths = {0, 1, 2, 3, 10, 1000, 65536, 65537, 100003, 7};
  std::string list;
  for (int64_t n : lengths) list += str_cat(list.empty() ? "" : ",", n);
  for (uint32_t seed : {0u, 1u, 1234u, 987654321u}) {
    ScratchDir dir;
    ASSERT_EQ(run_reference(str_cat("shuffle --seed ", seed, " --lengths ", list), dir.path()), "");
    const std::vector<int64_t> expected = read_i64(dir / "shuffle.i64");
    NumpyRandomState rng(seed);
    size_t at = 0;
    for (int64_t n : lengths) {
      std::vector<int64_t> a(static_cast<size_t>(n));
      std::iota(a.begin(), a.end(), 0);
      rng.shuffle(std::span<int64_t>(a));
      ASSERT_LE(at + a.size(), expected.size());
      for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], expected[at + i]) << "seed " << seed << " n " << n << " i " << i;
      at += a.size();
    }
    EXPECT_EQ(at, expected.size());
  }
}

TEST(NumpyRandomState, ShuffleIgnoresElementType) {
  std::vector<uint32_t> a(1000);
  std::vector<int64_t> b(1000);
  std::iota(a.begin(), a.end(), 0u);
  std::iota(b.begin(), b.end(), 0);
  NumpyRandomState ra(42), rb(42);
  ra.shuffle(std::span<uint32_t>(a));
  rb.shuffle(std::span<int64_t>(b));
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], static_cast<uint32_t>(b[i]));
}

// Above 32 bits random_interval draws 64-bit values (high word first) under the wider mask.
TEST(NumpyRandomState, RandomIntervalWideRangeUsesSixtyFourBitDraws) {
  const uint64_t max = (uint64_t{1} << 40) + 12345;
  NumpyRandomState a(7), b(7);
  const uint64_t mask = (uint64_t{1} << 41) - 1;
  uint64_t expected;
  do {
    const uint64_t hi = b.next_uint32();
    expected = ((hi << 32) | b.next_uint32()) & mask;
  } while (expected > max);
  EXPECT_EQ(a.random_interval(max), expected);
  EXPECT_EQ(a.random_interval(0), 0u);
  EXPECT_EQ(a.next_uint32(), b.next_uint32());  // random_interval(0) draws nothing
}

}  // namespace
}  // namespace tessera::data
