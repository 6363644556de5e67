// CRC-32C against the check values of the standard (RFC 3720 B.4) and a bitwise definition.
#include "ckpt/crc32c.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tessera::ckpt {
namespace {

uint32_t bitwise_crc32c(const std::vector<unsigned char>& data) {
  uint32_t c = 0xFFFFFFFF;
  for (unsigned char b : data) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78 : c >> 1;
  }
  return ~c;
}

TEST(Crc32c, StandardCheckValues) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  std::vector<unsigned char> zeros(32, 0), ones(32, 0xFF), inc(32);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c(inc.data(), 32), 0x46DD794Eu);
}

TEST(Crc32c, ExtendingMatchesOneShotAndTheBitwiseDefinition) {
  std::vector<unsigned char> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 7 + 3);
  for (size_t split : {0, 1, 7, 8, 9, 500, 1000}) {
    uint32_t c = crc32c_extend(crc32c(data.data(), split), data.data() + split, data.size() - split);
    EXPECT_EQ(c, bitwise_crc32c(data)) << "split at " << split;
  }
  EXPECT_EQ(crc32c_str(0x1a2b3c4d), "crc32c:1a2b3c4d");
}

}  // namespace
}  // namespace tessera::ckpt
