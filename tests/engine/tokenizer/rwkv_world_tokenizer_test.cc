// RwkvWorldTokenizer on a vocabulary generated here in rwkv_vocab_v20230424.txt's line format
// (no copy of the real file is available offline): literal parsing, greedy longest match,
// streaming decode, and load errors naming file and line.
#include "engine/tokenizer/rwkv_world_tokenizer.h"

#include <cstdio>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flatstate {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Ids 1-256 are the single bytes 0-255 (as in the real file), then a few longer tokens.
std::string Vocab() {
  std::string v;
  char buf[64];
  for (int b = 0; b < 256; ++b) {
    if (b >= 0x20 && b < 0x7F && b != '\'' && b != '\\') {
      std::snprintf(buf, sizeof(buf), "%d '%c' 1\n", b + 1, b);
    } else if (b == '\'') {
      std::snprintf(buf, sizeof(buf), "%d \"'\" 1\n", b + 1);
    } else if (b == '\\') {
      std::snprintf(buf, sizeof(buf), "%d '\\\\' 1\n", b + 1);
    } else if (b < 0x80) {
      std::snprintf(buf, sizeof(buf), "%d '\\x%02x' 1\n", b + 1, b);
    } else {
      std::snprintf(buf, sizeof(buf), "%d b'\\x%02x' 1\n", b + 1, b);
    }
    v += buf;
  }
  v += "257 'hello' 5\n258 ' world' 6\n259 '\xE4\xBD\xA0\xE5\xA5\xBD' 6\n260 b'\\xe4\\xbd' 2\n";
  v += "261 'he' 2\n262 '\\n\\n' 2\n263 '\\u4f60' 3\n";
  return v;
}

std::unique_ptr<RwkvWorldTokenizer> Make() {
  auto t = RwkvWorldTokenizer::Parse(Vocab(), "rwkv_vocab.txt");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

TEST(RwkvWorldTokenizer, ParsesPythonLiterals) {
  EXPECT_EQ(*ParsePythonLiteral("'a\\tb'"), "a\tb");
  EXPECT_EQ(*ParsePythonLiteral("\"it's\""), "it's");
  EXPECT_EQ(*ParsePythonLiteral("'\\u4f60'"), "\xE4\xBD\xA0");
  EXPECT_EQ(*ParsePythonLiteral("'\\U0001F600'"), "\xF0\x9F\x98\x80");
  EXPECT_EQ(*ParsePythonLiteral("'\\xe9'"), "\xC3\xA9");  // str: U+00E9 as UTF-8
  EXPECT_EQ(*ParsePythonLiteral("b'\\xe9'"), "\xE9");     // bytes: the byte
  EXPECT_EQ(*ParsePythonLiteral("'\\101'"), "A");
  EXPECT_FALSE(ParsePythonLiteral("'abc").ok());
  EXPECT_FALSE(ParsePythonLiteral("b'\xC3\xA9'").ok());
  EXPECT_FALSE(ParsePythonLiteral("'\\x4'").ok());
}

TEST(RwkvWorldTokenizer, GreedyLongestMatch) {
  auto t = Make();
  EXPECT_EQ(t->kind(), "rwkv-world");
  EXPECT_EQ(t->vocab_size(), 264);  // the largest id in the file + 1
  EXPECT_THAT(*t->Encode("hello world", false), ElementsAre(257, 258));
  EXPECT_THAT(*t->Encode("hel", false), ElementsAre(261, 'l' + 1));
  EXPECT_THAT(*t->Encode("\xE4\xBD\xA0\xE5\xA5\xBD!", false), ElementsAre(259, '!' + 1));
  EXPECT_THAT(*t->Encode("\xE4\xBD\xA0", false), ElementsAre(263));
  EXPECT_THAT(*t->Encode("\n\n\n", false), ElementsAre(262, '\n' + 1));
  EXPECT_THAT(*t->Encode("\xFF", false), ElementsAre(256));
  EXPECT_EQ(t->TokenBytes(258), " world");
}

TEST(RwkvWorldTokenizer, StreamsUtf8) {
  auto t = Make();
  std::string state;
  EXPECT_EQ(t->DecodeNext(260, &state), "");  // E4 BD: half a character
  EXPECT_EQ(state, "\xE4\xBD");
  EXPECT_EQ(t->DecodeNext(0xA0 + 1, &state), "\xE4\xBD\xA0");
  EXPECT_EQ(t->DecodeNext(260, &state), "");
  EXPECT_EQ(t->DecodeFlush(&state), "\xEF\xBF\xBD");
  EXPECT_EQ(t->Decode(*t->Encode("hello world \xE4\xBD\xA0", false)), "hello world \xE4\xBD\xA0");
  std::string foreign = "\xFF\xFF\xFF\xFF\xFF";
  t->DecodeNext(257, &foreign);
  EXPECT_LE(foreign.size(), kMaxDecoderStateBytes);
}

TEST(RwkvWorldTokenizer, LoadErrorsNameFileAndLine) {
  const auto err = [](const std::string& text) {
    auto t = RwkvWorldTokenizer::Parse(text, "rwkv_vocab.txt");
    EXPECT_FALSE(t.ok());
    return t.ok() ? std::string() : std::string(t.status().message());
  };
  EXPECT_THAT(err("1 'a' 1\n2 'ab' 3\n"),
              HasSubstr("rwkv_vocab.txt:2: the literal is 2 bytes, the line says 3"));
  EXPECT_THAT(err("x 'a' 1\n"), HasSubstr("rwkv_vocab.txt:1: bad id"));
  EXPECT_THAT(err("70000 'a' 1\n"), HasSubstr("id 70000 is outside [1, 65536)"));
  EXPECT_THAT(err("1 'a' 1\n1 'b' 1\n"), HasSubstr("rwkv_vocab.txt:2: id 1 appears twice"));
  EXPECT_THAT(err("1 'a 1\n"), HasSubstr("rwkv_vocab.txt:1: not a quoted Python literal"));
  EXPECT_THAT(err("1 'a'\n"), HasSubstr("rwkv_vocab.txt:1: expected"));
  auto partial = RwkvWorldTokenizer::Parse("1 'a' 1\n", "v.txt");
  ASSERT_TRUE(partial.ok());
  EXPECT_FALSE((*partial)->Encode("ab", false).ok());
}

}  // namespace
}  // namespace flatstate
