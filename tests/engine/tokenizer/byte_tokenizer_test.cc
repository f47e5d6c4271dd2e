#include "engine/tokenizer/byte_tokenizer.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flatstate {
namespace {

using ::testing::HasSubstr;

const std::string kFffd(kReplacementChar);

// Pushes every byte of `bytes` one token at a time; returns the pieces (Flush included last).
std::vector<std::string> PushAll(std::string_view bytes) {
  IncrementalDecoder d;
  std::vector<std::string> pieces;
  for (char c : bytes) pieces.push_back(d.Push(static_cast<uint8_t>(c)));
  pieces.push_back(d.Flush());
  return pieces;
}

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& p : v) s += p;
  return s;
}

TEST(ByteTokenizerTest, EncodeIsBytes) {
  EXPECT_EQ(Encode("Ab\xC3\xA9"), (std::vector<int32_t>{65, 98, 0xC3, 0xA9}));
  EXPECT_TRUE(Encode("").empty());
  const std::string nul("a\0b", 3);
  EXPECT_EQ(Encode(nul), (std::vector<int32_t>{97, 0, 98}));
}

TEST(ByteTokenizerTest, RoundTripValidText) {
  const std::string text = "hello, w\xC3\xB6rld \xE2\x82\xAC \xF0\x9F\x98\x80 \xEF\xBF\xBD end";
  ASSERT_TRUE(IsValidUtf8(text));
  EXPECT_EQ(Decode(Encode(text)), text);
  EXPECT_EQ(Join(PushAll(text)), text);
}

TEST(ByteTokenizerTest, MultiByteCharIsHeldUntilComplete) {
  // U+1F600 (4 bytes) split across four pushes: nothing until the last byte.
  const auto pieces = PushAll("a\xF0\x9F\x98\x80z");
  ASSERT_EQ(pieces.size(), 7u);
  EXPECT_EQ(pieces[0], "a");
  EXPECT_EQ(pieces[1], "");
  EXPECT_EQ(pieces[2], "");
  EXPECT_EQ(pieces[3], "");
  EXPECT_EQ(pieces[4], "\xF0\x9F\x98\x80");
  EXPECT_EQ(pieces[5], "z");
  EXPECT_EQ(pieces[6], "");
  // Every piece is valid UTF-8 on its own.
  for (const auto& p : pieces) EXPECT_TRUE(IsValidUtf8(p));
}

TEST(ByteTokenizerTest, TwoAndThreeByteChars) {
  auto p = PushAll("\xC3\xA9\xE2\x82\xAC");
  EXPECT_EQ(p, (std::vector<std::string>{"", "\xC3\xA9", "", "", "\xE2\x82\xAC", ""}));
}

TEST(ByteTokenizerTest, InvalidBytesBecomeReplacement) {
  struct Case {
    std::string in, out;
  };
  const std::vector<Case> cases = {
      {"\x80", kFffd},                          // stray continuation
      {"a\xBFz", "a" + kFffd + "z"},            // stray continuation between ASCII
      {"\xC0\xAF", kFffd + kFffd},              // overlong lead (C0) then stray continuation
      {"\xFF", kFffd},                          // never valid
      {"\xF5\x80\x80\x80", kFffd + kFffd + kFffd + kFffd},  // beyond U+10FFFF lead
      {"\xE0\x80\x80", kFffd + kFffd + kFffd},  // overlong 3-byte: E0 needs A0..BF next
      {"\xED\xA0\x80", kFffd + kFffd + kFffd},  // surrogate U+D800
      {"\xF4\x90\x80\x80", kFffd + kFffd + kFffd + kFffd},  // > U+10FFFF
      {"\xE2\x82" "A", kFffd + "A"},            // truncated then ASCII: one U+FFFD
      {"\xE2\x82\xE2\x82\xAC", kFffd + "\xE2\x82\xAC"},  // truncated then a full char
      {"\xC3", kFffd},                          // dangling at the end: Flush
      {"\xF0\x9F\x98", kFffd},                  // dangling 3 of 4 bytes
  };
  for (const Case& c : cases) {
    const std::string got = Join(PushAll(c.in));
    EXPECT_EQ(got, c.out) << "input " << ::testing::PrintToString(c.in);
    EXPECT_TRUE(IsValidUtf8(got));
    EXPECT_FALSE(IsValidUtf8(c.in));
    EXPECT_EQ(Decode(Encode(c.in)), c.out);
  }
}

TEST(ByteTokenizerTest, FlushResetsForANewStream) {
  IncrementalDecoder d;
  EXPECT_EQ(d.Push(0xE2), "");
  EXPECT_TRUE(d.has_pending());
  EXPECT_EQ(d.Flush(), kFffd);
  EXPECT_FALSE(d.has_pending());
  EXPECT_EQ(d.Flush(), "");
  EXPECT_EQ(d.Push(0x82), kFffd);  // a continuation with nothing pending
  EXPECT_EQ(d.Push('x'), "x");
}

TEST(ByteTokenizerTest, OutOfRangeTokenIsReplacement) {
  IncrementalDecoder d;
  EXPECT_EQ(d.Push(300), kFffd);
  EXPECT_EQ(d.Push(0xC3), "");
  EXPECT_EQ(d.Push(-1), kFffd + kFffd);  // pending C3 and the bad token
  EXPECT_EQ(d.Push('a'), "a");
}

TEST(ByteTokenizerTest, IsValidUtf8) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("\xF4\x8F\xBF\xBF"));  // U+10FFFF
  EXPECT_TRUE(IsValidUtf8("\xEF\xBF\xBD"));      // U+FFFD itself
  EXPECT_FALSE(IsValidUtf8("\xEF\xBF"));
  EXPECT_FALSE(IsValidUtf8("\xEF\xBF" "A"));
}

TEST(ByteTokenizerTest, AllByteValuesDecodeToValidUtf8) {
  std::vector<int32_t> all;
  for (int rep = 0; rep < 3; ++rep) {
    for (int b = 255; b >= 0; --b) all.push_back(b);
  }
  EXPECT_TRUE(IsValidUtf8(Decode(all)));
}

TEST(ByteTokenizerTest, ValidateTokens) {
  EXPECT_TRUE(ValidateTokens({0, 255, 17}, 256, "prompt_tokens").ok());
  EXPECT_TRUE(ValidateTokens({}, 256, "prompt_tokens").ok());
  absl::Status s = ValidateTokens({1, 2, 3, 300}, 256, "prompt_tokens");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "prompt_tokens[3] = 300 is out of range [0, 256)");
  s = ValidateTokens({-5}, 256, "stop_tokens");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("stop_tokens[0] = -5"));
}

}  // namespace
}  // namespace flatstate
