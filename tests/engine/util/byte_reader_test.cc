#include "engine/util/byte_reader.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flatstate {
namespace {

using ::testing::HasSubstr;

TEST(ByteReaderTest, ReadsLittleEndianFieldsInOrder) {
  const std::string data("\x01\x02\x00\x00\x00\xFF\xFF\xFF\xFF\x00\x00\xC0\x3FXYZ", 16);
  ByteReader r("blob", data, 0, data.size());
  uint8_t u8 = 0;
  uint32_t u32 = 0;
  int32_t i32 = 0;
  float f = 0;
  std::string_view bytes;
  ASSERT_TRUE(r.U8("a", &u8).ok());
  ASSERT_TRUE(r.U32("b", &u32).ok());
  ASSERT_TRUE(r.I32("c", &i32).ok());
  ASSERT_TRUE(r.F32("d", &f).ok());
  ASSERT_TRUE(r.Bytes("e", 3, &bytes).ok());
  EXPECT_EQ(u8, 1);
  EXPECT_EQ(u32, 2u);
  EXPECT_EQ(i32, -1);
  EXPECT_EQ(f, 1.5f);
  EXPECT_EQ(bytes, "XYZ");
  EXPECT_EQ(r.remaining(), 0u);
}

TEST(ByteReaderTest, ShortReadIsDataLossNamingTheFieldAndLeavesEverythingUnchanged) {
  const std::string data = "abcdefgh";
  ByteReader r("checkpoint", data, 2, 7);  // 5 bytes: "cdefg"
  uint32_t u32 = 0;
  ASSERT_TRUE(r.U32("first", &u32).ok());
  uint64_t u64 = 42;
  absl::Status s = r.U64("second", &u64);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(std::string(s.message()),
            "truncated checkpoint: field second at offset 6 needs 8 bytes, 1 left");
  EXPECT_EQ(u64, 42u);
  EXPECT_EQ(r.pos(), 6u);
  std::string_view v;
  EXPECT_THAT(std::string(r.Bytes("tail", 2, &v).message()), HasSubstr("field tail"));
  EXPECT_TRUE(r.Need(1, "x").ok());
}

}  // namespace
}  // namespace flatstate
