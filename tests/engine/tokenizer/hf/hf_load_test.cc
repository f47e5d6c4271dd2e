// Tests of the tokenizer.json load path's fast paths (json_reader.cc, token_index.cc, the merge
// resolution in bpe_model.cc) on raw JSON text, so that escapes, number forms and byte positions
// are exactly as written: escaped and plain strings read alike, vocabulary values outside the
// small-integer fast path, a string under two ids, continuing_subword_prefix, string errors at
// the right byte, FromFile through its file mapping.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/tokenizer/hf/hf_tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flatstate {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A tokenizer.json with the given model.vocab object and model.merges list (JSON text).
std::string Doc(const std::string& vocab, const std::string& merges,
                const std::string& more_model = "") {
  return R"({"version": "1.0", "added_tokens": [], "normalizer": null, "pre_tokenizer": null,
  "post_processor": null, "decoder": null, "model": {"type": "BPE", "dropout": null,
  "unk_token": null)" +
         more_model + R"(, "vocab": )" + vocab + R"(, "merges": )" + merges + "}}";
}

std::vector<int32_t> Enc(const std::string& json, const std::string& text) {
  auto t = HfTokenizer::FromJson(json, "tokenizer.json");
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return {};
  return *(*t)->Encode(text, false);
}

std::string Error(const std::string& json) {
  auto t = HfTokenizer::FromJson(json, "tokenizer.json");
  EXPECT_FALSE(t.ok());
  return t.ok() ? "" : std::string(t.status().message());
}

TEST(HfLoad, EscapedAndPlainStringsReadAlike) {
  const std::string vocab = R"({"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4})";
  const std::string escaped = R"({"\u0061": 0, "\u0062": 1, "c": 2, "a\u0062": 3, "\u0061bc": 4})";
  for (const std::string& v : {vocab, escaped}) {
    for (const std::string& m :
         {std::string(R"(["a b", "ab c"])"), std::string(R"(["\u0061 b", "ab \u0063"])"),
          std::string(R"([["\u0061", "\u0062"], ["a\u0062", "c"]])"),
          std::string(R"([ [ "a" , "b" ] , [ "ab" , "c" ] ])")}) {
      EXPECT_THAT(Enc(Doc(v, m), "abc"), ElementsAre(4)) << v << " " << m;
      EXPECT_THAT(Enc(Doc(v, m), "ab"), ElementsAre(3)) << v << " " << m;
    }
  }
}

TEST(HfLoad, LongAndMultiByteKeys) {
  // Keys past 8 bytes (the scanner's word), with an escaped quote at several offsets, and 2-, 3-
  // and 4-byte UTF-8.
  const std::string vocab =
      R"({"x": 0, "y": 1, "abcdefghijklmnopq": 2, "abcdefgh\"ij": 3, "\u00e9": 4, "€": 5,
          "😀": 6, "é€": 7, "xy": 8})";
  auto t = HfTokenizer::FromJson(Doc(vocab, R"(["x y"])"), "tokenizer.json");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->TokenToId("abcdefghijklmnopq"), 2);
  EXPECT_EQ((*t)->TokenToId("abcdefgh\"ij"), 3);
  EXPECT_EQ((*t)->TokenToId("\xC3\xA9"), 4);
  EXPECT_EQ((*t)->TokenToId("\xE2\x82\xAC"), 5);
  EXPECT_EQ((*t)->TokenToId("\xF0\x9F\x98\x80"), 6);
  EXPECT_EQ((*t)->TokenToId("\xC3\xA9\xE2\x82\xAC"), 7);
  EXPECT_EQ((*t)->TokenToId("abcdefgh"), -1);
  EXPECT_THAT(*(*t)->Encode("xy", false), ElementsAre(8));
}

TEST(HfLoad, VocabularyValuesOutsideTheFastPath) {
  const auto value_error = [](const std::string& value) {
    return Error(Doc(R"({"a": 0, "b": )" + value + "}", "[]"));
  };
  EXPECT_THAT(value_error("1.0"),
              HasSubstr(R"(model.vocab["b"]: id 1.0 is not an integer in [0, 16777216))"));
  EXPECT_THAT(value_error("1e0"), HasSubstr(R"(model.vocab["b"]: id 1.0 is not)"));
  EXPECT_THAT(value_error("16777216"), HasSubstr(R"(model.vocab["b"]: id 16777216 is not)"));
  EXPECT_THAT(value_error("123456789"), HasSubstr(R"(model.vocab["b"]: id 123456789 is not)"));
  EXPECT_THAT(value_error("-1"), HasSubstr(R"(model.vocab["b"]: id -1 is not)"));
  EXPECT_THAT(value_error("\"1\""), HasSubstr(R"(model.vocab["b"]: id "1" is not)"));
  EXPECT_THAT(value_error("[1]"), HasSubstr(R"(model.vocab["b"]: id [1] is not)"));
  EXPECT_THAT(value_error("01"), HasSubstr("not valid JSON at byte"));
  EXPECT_THAT(value_error("1-2"), HasSubstr("not valid JSON at byte"));
  // The first bad value in file order is the one named; a key with an escape keeps its text.
  EXPECT_THAT(Error(Doc(R"({"\u0061": true, "b": 2.5})", "[]")),
              HasSubstr(R"(model.vocab["a"]: id true is not)"));
  // -0 is the integer 0 (through the general number path), as before.
  EXPECT_THAT(Enc(Doc(R"({"a": -0, "b": 1, "ab": 2})", R"(["a b"])"), "ab"), ElementsAre(2));
}

TEST(HfLoad, AStringUnderTwoIdsMapsToTheLargest) {
  // "ab" is id 2 and id 7; merge "x x" makes id 2 the next id in merge order, which must not be
  // taken for "a b": the index maps "ab" to 7, as a map filled in id order would.
  const std::string vocab = R"({"a": 0, "b": 3, "ab": 2, "x": 4, "xx": 1, "ab": 7})";
  EXPECT_THAT(Enc(Doc(vocab, R"(["x x", "a b"])"), "ab"), ElementsAre(7));
  EXPECT_THAT(Enc(Doc(vocab, R"(["x x", "a b"])"), "xx"), ElementsAre(1));
  // The same id twice for one key is one entry; one id for two keys is refused.
  EXPECT_THAT(Enc(Doc(R"({"a": 0, "b": 1, "ab": 2, "ab": 2})", R"(["a b"])"), "ab"),
              ElementsAre(2));
  EXPECT_THAT(Error(Doc(R"({"a": 0, "b": 0})", "[]")),
              HasSubstr(R"(model.vocab["b"]: id 0 is used twice)"));
}

TEST(HfLoad, MergedTokensOutOfOrderAndSubwordPrefix) {
  // Merged ids that do not follow the merge order (the guessed next id misses every time).
  EXPECT_THAT(
      Enc(Doc(R"({"abc": 0, "a": 1, "b": 2, "c": 3, "ab": 4})", R"(["a b", "ab c"])"), "abc"),
      ElementsAre(0));
  const std::string prefixed =
      Doc(R"({"a": 0, "##b": 1, "##c": 2, "ab": 3, "abc": 4})", R"(["a ##b", "ab ##c"])",
          R"(, "continuing_subword_prefix": "##")");
  EXPECT_THAT(Enc(prefixed, "abc"), ElementsAre(4));
  EXPECT_THAT(Enc(prefixed, "ab"), ElementsAre(3));
  EXPECT_THAT(Error(Doc(R"({"a": 0, "b": 1})", R"([["a", "b"]])")),
              HasSubstr(R"(model.merges[0]: merged token "ab" is not in model.vocab)"));
  EXPECT_THAT(Error(Doc(R"({"a": 0, "b": 1, "ab": 2})", R"(["a b", ["\u0061", 5]])")),
              HasSubstr(R"(model.merges[1]: expected "a b" or [a, b], got ["a",5])"));
  EXPECT_THAT(Error(Doc(R"({"a": 0, "b": 1, "ab": 2})", R"(["a b", "ab"])")),
              HasSubstr(R"(model.merges[1]: expected "a b" or [a, b], got "ab")"));
}

TEST(HfLoad, StringErrorsAtTheirByte) {
  const auto error_at = [](const std::string& key, char bad) {
    const std::string json = Doc("{\"" + key + "\": 0}", "[]");
    return std::make_pair(Error(json), json.find(bad));
  };
  for (const std::string& key : {std::string("abcdefghijk\x01"), std::string("\x01"),
                                 std::string("abcdefghijklmnopqrstuvw\x1F")}) {
    const auto [error, at] = error_at(key, key.back());
    EXPECT_THAT(error, HasSubstr("not valid JSON at byte " + std::to_string(at) +
                                 ": control character in string"));
  }
  for (const std::string& bad : {std::string("\xC0\x80"), std::string("\xED\xA0\x80"),
                                 std::string("\xF5\x80\x80\x80"), std::string("\xC3")}) {
    const auto [error, at] = error_at("abcdefghij" + bad + "x", bad[0]);
    EXPECT_THAT(error, HasSubstr("not valid JSON at byte " + std::to_string(at) +
                                 ": invalid UTF-8 in string"));
  }
  EXPECT_THAT(Error(Doc(R"({"abcdefghijklmn\q": 0})", "[]")), HasSubstr("bad escape"));
  EXPECT_THAT(Error(R"({"model": {"vocab": {"abcdefghijklmnop)"), HasSubstr("unterminated string"));
}

TEST(HfLoad, FromFileMapsAndErrsLikeARead) {
  const std::string dir = testing::TempDir() + "/hf_load_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/tokenizer.json") << Doc(R"({"a": 0, "b": 1, "ab": 2})", R"(["a b"])");
  auto t = HfTokenizer::FromFile(dir + "/tokenizer.json");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(*(*t)->Encode("ab", false), ElementsAre(2));
  auto missing = HfTokenizer::FromFile(dir + "/nope.json");
  EXPECT_TRUE(absl::IsNotFound(missing.status()));
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("nope.json: cannot open"));
  auto empty_dir = HfTokenizer::FromFile(dir);
  EXPECT_FALSE(empty_dir.ok());
  std::ofstream(dir + "/empty.json").flush();
  auto empty = HfTokenizer::FromFile(dir + "/empty.json");
  EXPECT_THAT(std::string(empty.status().message()), HasSubstr("empty.json: not valid JSON"));
}

}  // namespace
}  // namespace flatstate
