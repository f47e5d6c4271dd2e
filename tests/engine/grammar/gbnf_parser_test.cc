// GBNF parsing and compilation: the syntax llama.cpp's grammars use, and the errors (with line
// and column) for what is malformed.
#include "engine/grammar/gbnf_parser.h"

#include <string>

#include "engine/grammar/compiled_grammar.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flatstate::grammar {
namespace {

using ::testing::HasSubstr;

std::string ErrorOf(const std::string& gbnf) {
  auto g = CompiledGrammar::FromGbnf(gbnf);
  EXPECT_FALSE(g.ok()) << gbnf;
  return g.ok() ? "" : std::string(g.status().message());
}

TEST(GbnfParserTest, ParsesLlamaCppSyntax) {
  const char* kChess = R"(# comment
root ::= (
    # nested comment
    "1. " move " " move "\n"
    ([1-9] [0-9]? ". " move " " move "\n")+
)
move ::= (pawn | nonpawn | castle) [+#]?
pawn ::= [a-h] [1-8]
nonpawn ::= [NBKQR] [a-h]? [1-8]? "x"? [a-h] [1-8]
castle ::= "O-O" "-O"?   # trailing comment
)";
  auto g = CompiledGrammar::FromGbnf(kChess);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->rule_name((*g)->root()), "root");
}

TEST(GbnfParserTest, AlternativesContinueAfterBarNewline) {
  auto parsed = ParseGbnf("root ::= \"a\" |\n  \"b\" |\n\n \"c\"\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->rules[parsed->root].alternatives.size(), 3u);
}

TEST(GbnfParserTest, EscapesDecodeToCodePoints) {
  auto parsed = ParseGbnf(R"(root ::= "\x41\u00e9\U0001F600\n\t\\\"" [\]\[\-])");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const auto& alt = parsed->rules[parsed->root].alternatives[0];
  ASSERT_EQ(alt.size(), 8u);
  const uint32_t expected[] = {0x41, 0xE9, 0x1F600, '\n', '\t', '\\', '"'};
  for (int i = 0; i < 7; ++i) EXPECT_TRUE(alt[i].chars.Contains(expected[i])) << i;
  EXPECT_TRUE(alt[7].chars.Contains(']'));
  EXPECT_TRUE(alt[7].chars.Contains('['));
  EXPECT_TRUE(alt[7].chars.Contains('-'));
  EXPECT_FALSE(alt[7].chars.Contains('a'));
}

TEST(GbnfParserTest, NegatedClassAndDotCoverUnicode) {
  auto parsed = ParseGbnf("root ::= [^\"a-c] .");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const auto& alt = parsed->rules[parsed->root].alternatives[0];
  EXPECT_FALSE(alt[0].chars.Contains('"'));
  EXPECT_FALSE(alt[0].chars.Contains('b'));
  EXPECT_TRUE(alt[0].chars.Contains('d'));
  EXPECT_TRUE(alt[0].chars.Contains(0x10FFFF));
  EXPECT_FALSE(alt[0].chars.Contains(0xD800));  // surrogates are never matched
  EXPECT_TRUE(alt[1].chars.Contains(0));
}

TEST(GbnfParserTest, RepetitionForms) {
  for (const char* g : {"root ::= \"a\"{3}", "root ::= \"ab\"{2,}", "root ::= [a-z]{0,5}",
                        "root ::= (\"x\" | \"y\"){1,3} \"z\"*", "root ::= \"a\"+ \"b\"?"}) {
    EXPECT_TRUE(CompiledGrammar::FromGbnf(g).ok()) << g;
  }
}

TEST(GbnfParserTest, ErrorsNameLineAndColumn) {
  EXPECT_THAT(ErrorOf("root ::= \"a\"\nfoo ::= bar\n"),
              HasSubstr("GBNF 2:9: undefined rule 'bar'"));
  EXPECT_THAT(ErrorOf("root ::= \"abc\n"), HasSubstr("GBNF 1:14: unterminated string literal"));
  EXPECT_THAT(ErrorOf("root ::= [a-z\n"), HasSubstr("GBNF 1:10: unterminated character class"));
  EXPECT_THAT(ErrorOf("root ::= (\"a\" | \"b\"\n"), HasSubstr("GBNF 2:1: expected ')'"));
  EXPECT_THAT(ErrorOf("root := \"a\""), HasSubstr("GBNF 1:6: expected '::='"));
  EXPECT_THAT(ErrorOf("root ::= \"a\"\n\n  * \"b\""), HasSubstr("GBNF 3:3: expected a rule name"));
  EXPECT_THAT(ErrorOf("root ::= * \"b\""), HasSubstr("GBNF 1:10: a repetition needs something"));
  EXPECT_THAT(ErrorOf("root ::= \"a\"{3,2}"), HasSubstr("GBNF 1:17: a repetition's maximum"));
  EXPECT_THAT(ErrorOf("root ::= \"a\"{99999}"), HasSubstr("repetition count over 10000"));
  EXPECT_THAT(ErrorOf("root ::= \"\\q\""), HasSubstr("GBNF 1:11: unknown escape"));
  EXPECT_THAT(ErrorOf("root ::= [z-a]"), HasSubstr("GBNF 1:14: a character range ends below"));
  EXPECT_THAT(ErrorOf("root ::= \"a\"\nroot ::= \"b\""),
              HasSubstr("GBNF 2:1: rule 'root' is defined twice"));
  EXPECT_THAT(ErrorOf("start ::= \"a\""), HasSubstr("the grammar has no 'root' rule"));
  EXPECT_THAT(ErrorOf("root ::= \"\xC3\""), HasSubstr("GBNF 1:11: invalid UTF-8"));
  EXPECT_THAT(ErrorOf("root ::= \"a\" )"), HasSubstr("GBNF 1:14: expected the end of the line"));
}

TEST(GbnfParserTest, LeftRecursionIsRefusedNamingTheRule) {
  EXPECT_THAT(ErrorOf("root ::= expr\nexpr ::= expr \"+\" term | term\nterm ::= [0-9]"),
              HasSubstr("left recursion in rule 'expr'"));
  // Indirect, through a nullable prefix.
  EXPECT_THAT(ErrorOf("root ::= a\na ::= b? c\nb ::= \"x\"\nc ::= a \"y\" | \"z\""),
              HasSubstr("left recursion in rule"));
  // A repeated expression that can be empty would loop forever.
  EXPECT_THAT(ErrorOf("root ::= (\"a\"?)*"), HasSubstr("left recursion in rule 'root'"));
  // Right recursion is fine.
  EXPECT_TRUE(CompiledGrammar::FromGbnf("root ::= \"a\" root | \"b\"").ok());
}

TEST(GbnfParserTest, CompiledFingerprintDependsOnTheGrammar) {
  auto a = CompiledGrammar::FromGbnf("root ::= [a-z]+");
  auto b = CompiledGrammar::FromGbnf("root ::= [a-y]+");
  auto c = CompiledGrammar::FromGbnf("root ::=   [a-z]+   # same");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_NE((*a)->fingerprint(), (*b)->fingerprint());
  EXPECT_EQ((*a)->fingerprint(), (*c)->fingerprint());
}

}  // namespace
}  // namespace flatstate::grammar
