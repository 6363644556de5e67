#include "data/python_round.h"

#include <gtest/gtest.h>

namespace tessera::data {
namespace {

// python3: round(4.5) == 4, round(5.5) == 6, round(10.5) == 10, round(16.5) == 16, round(-0.5) == 0,
// round(-1.5) == -2; off the tie it is the nearest integer.
TEST(PythonRound, TiesGoToEven) {
  EXPECT_EQ(python_round(4.5), 4);
  EXPECT_EQ(python_round(5.5), 6);
  EXPECT_EQ(python_round(10.5), 10);
  EXPECT_EQ(python_round(16.5), 16);
  EXPECT_EQ(python_round(-0.5), 0);
  EXPECT_EQ(python_round(-1.5), -2);
  EXPECT_EQ(python_round(4.500000178813934), 5);  // 30 x 0.15f: past the tie
  EXPECT_EQ(python_round(2.4999999), 2);
}

// helpers.cpp's C round differs exactly on the ties it takes away from zero.
TEST(PythonRound, DiffersFromCRoundOnTies) {
  EXPECT_EQ(std::round(2.5), 3);
  EXPECT_EQ(python_round(2.5), 2);
}

}  // namespace
}  // namespace tessera::data
