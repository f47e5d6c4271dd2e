#include "engine/util/little_endian.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "gtest/gtest.h"

namespace flatstate {
namespace {

TEST(LittleEndianTest, LoadsAndStoresLeastSignificantByteFirst) {
  const char b4[] = {'\x78', '\x56', '\x34', '\x12'};
  EXPECT_EQ(LoadLe32(b4), 0x12345678u);
  const char b8[] = {'\x08', '\x07', '\x06', '\x05', '\x04', '\x03', '\x02', '\xF1'};
  EXPECT_EQ(LoadLe64(b8), 0xF102030405060708ull);

  char out[8] = {};
  StoreLe32(0x12345678u, out);
  EXPECT_EQ(std::memcmp(out, b4, 4), 0);
  StoreLe64(0xF102030405060708ull, out);
  EXPECT_EQ(std::memcmp(out, b8, 8), 0);

  std::string s;
  AppendLe32(0x12345678u, &s);
  AppendLe64(0xF102030405060708ull, &s);
  EXPECT_EQ(s, std::string(b4, 4) + std::string(b8, 8));
}

TEST(LittleEndianTest, FloatsRoundTripByBitPattern) {
  const float in[] = {1.5f, -std::numeric_limits<float>::infinity(),
                      std::numeric_limits<float>::quiet_NaN(), -0.0f};
  std::string s;
  AppendLeFloats(in, 4, &s);
  ASSERT_EQ(s.size(), 16u);
  EXPECT_EQ(LoadLe32(s.data()), 0x3FC00000u);  // 1.5f
  float out[4];
  LoadLeFloats(s.data(), 4, out);
  EXPECT_EQ(std::memcmp(in, out, sizeof(in)), 0);
}

}  // namespace
}  // namespace flatstate
