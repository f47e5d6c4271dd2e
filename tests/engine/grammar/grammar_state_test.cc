// GrammarState: matching bytes incrementally (JSON, arithmetic, repetition bounds, UTF-8
// classes), and the serialized state a session checkpoint carries.
#include "engine/grammar/grammar_state.h"

#include <memory>
#include <string>

#include "engine/grammar/compiled_grammar.h"
#include "engine/grammar/json_schema.h"
#include "gtest/gtest.h"

namespace flatstate::grammar {
namespace {

std::shared_ptr<const CompiledGrammar> Compile(const std::string& gbnf) {
  auto g = CompiledGrammar::FromGbnf(gbnf);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *g : nullptr;
}

// Whether `text` is a complete match (fed a byte at a time, to exercise the incremental path).
bool Matches(const std::shared_ptr<const CompiledGrammar>& g, const std::string& text) {
  auto state = GrammarState::Start(g);
  if (!state.ok()) return false;
  for (char c : text) {
    if (!state->Advance(std::string(1, c)).ok()) return false;
  }
  return state->IsComplete();
}

const char kArithmetic[] = R"gbnf(root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= number | "(" expr ")" | "-" factor
number ::= [0-9]+ ("." [0-9]+)?
)gbnf";

TEST(GrammarStateTest, Json) {
  auto g = Compile(JsonObjectGbnf());
  for (const char* ok : {"{}", "{ }", R"({"a": 1})", R"({"a":[1,2.5e3,-0.5,true,null,"x"]})",
                         "{\n  \"k\": {\"n\": {}},\n  \"s\": \"\\u00e9\\n\xC3\xA9\"\n}",
                         R"({"a":"\"\\\/\b\f\n\r\t"})"}) {
    EXPECT_TRUE(Matches(g, ok)) << ok;
  }
  for (const char* bad :
       {"", "[]", "{", R"({"a" 1})", R"({"a":01})", R"({"a":1,})", R"({'a':1})", "{\"a\":\"\x01\"}",
        R"({"a":"\q"})", R"({"a":tru})", R"({"a":"\ud800"})", "{} {}"}) {
    EXPECT_FALSE(Matches(g, bad)) << bad;
  }
}

TEST(GrammarStateTest, Arithmetic) {
  auto g = Compile(kArithmetic);
  for (const char* ok : {"1", "1+2*3", "(1+2)*3", "-(4.5/-2)", "((((7))))", "1-2-3"}) {
    EXPECT_TRUE(Matches(g, ok)) << ok;
  }
  for (const char* bad : {"", "1+", "(1", "1..2", "*3", "1 + 2", "()"}) {
    EXPECT_FALSE(Matches(g, bad)) << bad;
  }
}

TEST(GrammarStateTest, RepetitionBounds) {
  auto exact = Compile("root ::= \"ab\"{3}");
  EXPECT_TRUE(Matches(exact, "ababab"));
  EXPECT_FALSE(Matches(exact, "abab"));
  EXPECT_FALSE(Matches(exact, "abababab"));
  auto range = Compile("root ::= [0-9]{2,4} \"x\"");
  EXPECT_FALSE(Matches(range, "1x"));
  EXPECT_TRUE(Matches(range, "12x"));
  EXPECT_TRUE(Matches(range, "1234x"));
  EXPECT_FALSE(Matches(range, "12345x"));
  auto at_least = Compile("root ::= \"a\"{2,} \"b\"?");
  EXPECT_FALSE(Matches(at_least, "a"));
  EXPECT_TRUE(Matches(at_least, "aa"));
  EXPECT_TRUE(Matches(at_least, "aaaaaaab"));
  auto opt = Compile("root ::= \"a\"? \"b\"* \"c\"+");
  EXPECT_TRUE(Matches(opt, "c"));
  EXPECT_TRUE(Matches(opt, "abbcc"));
  EXPECT_FALSE(Matches(opt, "aab"));
}

TEST(GrammarStateTest, Utf8Classes) {
  auto g = Compile("root ::= [ぁ-ゟ]+ [^a-z\\x00-\\x7F] \"é\" .");
  EXPECT_TRUE(Matches(g, "ひらがな中éx"));
  EXPECT_TRUE(Matches(g, "あ\xF0\x9F\x98\x80\xC3\xA9\xF0\x9F\x98\x80"));
  EXPECT_FALSE(Matches(g, "カéx"));            // katakana is outside the hiragana range
  EXPECT_FALSE(Matches(g, "あaéx"));           // ASCII is excluded by the negated class
  EXPECT_FALSE(Matches(g, "あ中e\xCC\x81x"));  // "é" is U+00E9, not e + combining accent
  // Ill-formed UTF-8 is refused even where any code point may come.
  auto any = Compile("root ::= .+");
  EXPECT_TRUE(Matches(any, "\xE2\x82\xAC"));
  EXPECT_FALSE(Matches(any, "\xC0\xAF"));          // overlong
  EXPECT_FALSE(Matches(any, "\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(Matches(any, "\xF4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(Matches(any, "\xE2\x82"));          // incomplete: not a complete match
  // A byte prefix is accepted only if some code point of the class starts with it.
  auto state = GrammarState::Start(Compile("root ::= [\\u0800-\\u0FFF]"));
  ASSERT_TRUE(state.ok());
  EXPECT_TRUE(state->Accepts("\xE0\xA0"));
  EXPECT_FALSE(state->Accepts("\xE1"));
  EXPECT_FALSE(state->Accepts("\xE0\x80"));
}

TEST(GrammarStateTest, AdvanceIsAllOrNothing) {
  auto g = Compile("root ::= \"abc\" | \"abd\"");
  auto state = GrammarState::Start(g);
  ASSERT_TRUE(state.ok());
  EXPECT_TRUE(state->Accepts("ab"));
  EXPECT_FALSE(state->Accepts("abx"));
  const std::string before = state->Serialize();
  absl::Status s = state->Advance("abx");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("offset 2"), std::string::npos) << s;
  EXPECT_EQ(state->Serialize(), before);
  ASSERT_TRUE(state->Advance("ab").ok());
  EXPECT_FALSE(state->IsComplete());
  ASSERT_TRUE(state->Advance("d").ok());
  EXPECT_TRUE(state->IsComplete());
  EXPECT_FALSE(state->CanContinue());
}

TEST(GrammarStateTest, StackLimitRefusesAmbiguity) {
  // After n a's, each of the 2^n ways to close them is a distinct parse stack.
  auto g = Compile("root ::= s\ns ::= \"a\" s \"b\" | \"a\" s \"c\" | \"\"");
  GrammarLimits limits;
  limits.max_stacks = 8;
  auto state = GrammarState::Start(g, limits);
  ASSERT_TRUE(state.ok());
  absl::Status s = state->Advance(std::string(64, 'a'));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
}

TEST(GrammarStateTest, SerializeRoundTripMidInput) {
  auto g = Compile(JsonObjectGbnf());
  const std::string text =
      "{\"name\": \"caf\xC3\xA9\", \"tags\": [1, 2.5, {\"x\": null}], \"ok\": true}";
  // Split at every byte (some mid code point, mid number, mid keyword): the restored state
  // continues exactly as the original.
  for (size_t split = 0; split <= text.size(); ++split) {
    auto state = GrammarState::Start(g);
    ASSERT_TRUE(state.ok());
    ASSERT_TRUE(state->Advance(text.substr(0, split)).ok()) << split;
    const std::string blob = state->Serialize();
    auto restored = GrammarState::Deserialize(g, blob);
    ASSERT_TRUE(restored.ok()) << restored.status() << " at " << split;
    EXPECT_TRUE(*restored == *state) << split;
    EXPECT_EQ(restored->Serialize(), blob);
    ASSERT_TRUE(restored->Advance(text.substr(split)).ok()) << split;
    EXPECT_TRUE(restored->IsComplete());
  }
}

TEST(GrammarStateTest, DeserializeRefusesCorruption) {
  auto g = Compile(JsonObjectGbnf());
  auto state = GrammarState::Start(g);
  ASSERT_TRUE(state.ok());
  ASSERT_TRUE(state->Advance("{\"a\": [1, \"\xE4\xB8").ok());  // mid code point
  const std::string blob = state->Serialize();
  for (size_t i = 0; i < blob.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = blob;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      auto r = GrammarState::Deserialize(g, bad);
      EXPECT_FALSE(r.ok()) << "byte " << i << " bit " << bit;
    }
  }
  for (size_t n = 0; n < blob.size(); ++n) {
    EXPECT_EQ(GrammarState::Deserialize(g, blob.substr(0, n)).status().code(),
              absl::StatusCode::kDataLoss)
        << n;
  }
  auto other = Compile("root ::= \"x\"");
  EXPECT_EQ(GrammarState::Deserialize(other, blob).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// A blob with a valid checksum but an impossible stack is refused too.
TEST(GrammarStateTest, DeserializeRefusesImpossibleStacks) {
  auto g = Compile("root ::= \"a\" b\nb ::= \"b\" \"c\"");
  auto fnv = [](const std::string& s) {
    uint64_t h = 14695981039346656037ull;
    for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
    return h;
  };
  auto blob_with = [&](const std::string& key) {
    std::string out = "FSGS";
    out.push_back(1);
    for (int i = 0; i < 8; ++i)
      out.push_back(static_cast<char>((g->fingerprint() >> (8 * i)) & 0xFF));
    out += key;
    const uint64_t h = fnv(out);
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((h >> (8 * i)) & 0xFF));
    return out;
  };
  // cursor (0, 0, 0), one stack of depth 1 at position p.
  auto one = [&](uint8_t p) { return blob_with(std::string("\0\0\0\x01\x01", 5) + char(p)); };
  EXPECT_TRUE(GrammarState::Deserialize(g, one(0)).ok());  // "a" is a terminal
  EXPECT_EQ(GrammarState::Deserialize(g, one(1)).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(GrammarState::Deserialize(g, one(100)).status().code(), absl::StatusCode::kDataLoss);
  // No stacks at all.
  EXPECT_EQ(GrammarState::Deserialize(g, blob_with(std::string("\0\0\0\0", 4))).status().code(),
            absl::StatusCode::kDataLoss);
  // A cursor mid code point with an ASCII lead byte.
  EXPECT_EQ(GrammarState::Deserialize(g, blob_with(std::string("\x41\x01\0\x01\x01\0", 6)))
                .status()
                .code(),
            absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace flatstate::grammar
