#include "engine/util/crc32c.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace flatstate {
namespace {

TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
  // RFC 3720 (iSCSI) B.4 test vectors.
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF), inc(32);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(Crc32c(inc.data(), inc.size()), 0x46DD794Eu);
}

TEST(Crc32cTest, ChainingEqualsOneShot) {
  std::string msg;
  for (int i = 0; i < 1000; ++i) msg.push_back(static_cast<char>(i * 13 + 1));
  const uint32_t whole = Crc32c(msg.data(), msg.size());
  for (size_t split : {0, 1, 7, 8, 9, 500, 999, 1000}) {
    const uint32_t a = Crc32c(msg.data(), split);
    EXPECT_EQ(Crc32c(msg.data() + split, msg.size() - split, a), whole) << "split " << split;
  }
}

TEST(Crc32cTest, UnalignedStartsAgree) {
  std::string msg(100, '\0');
  for (int i = 0; i < 100; ++i) msg[i] = static_cast<char>(i * 31);
  for (size_t off = 0; off < 8; ++off) {
    std::string copy = std::string(off, 'x') + msg;
    EXPECT_EQ(Crc32c(copy.data() + off, msg.size()), Crc32c(msg.data(), msg.size()));
  }
}

}  // namespace
}  // namespace flatstate
