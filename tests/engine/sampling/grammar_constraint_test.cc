// GrammarConstraint and GrammarCache (engine/sampling/grammar_constraint.h) over a byte
// vocabulary with one EOS id: masks allow EOS only once the grammar is complete, never a special
// token as text; Advance follows the bytes; the cache compiles each source once and keeps at
// most its capacity.
#include "engine/sampling/grammar_constraint.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace flatstate {
namespace {

constexpr int32_t kEos = 256;
constexpr int32_t kSpecial = 257;  // e.g. "<|im_start|>": its text must never be generated

std::shared_ptr<const GrammarVocabulary> Vocab(int* builds = nullptr) {
  auto v = std::make_shared<GrammarVocabulary>();
  for (int i = 0; i < 256; ++i) v->token_bytes.push_back(std::string(1, static_cast<char>(i)));
  v->token_bytes.push_back("</s>");
  v->token_bytes.push_back("ab");  // special: left out of the trie although "ab" is text
  v->token_bytes.push_back("ab");  // the same bytes as a plain token
  v->eos_ids = {kEos};
  v->trie = *grammar::VocabularyTrie::Build(v->token_bytes, {kEos, kSpecial});
  if (builds != nullptr) ++*builds;
  return v;
}

std::vector<int32_t> Allowed(const GrammarConstraint& c, const grammar::GrammarState& s) {
  std::vector<float> logits(260, 1.f);
  EXPECT_TRUE(c.Mask(s, logits).ok());
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < 260; ++i) {
    if (!std::isinf(logits[static_cast<size_t>(i)])) ids.push_back(i);
  }
  return ids;
}

TEST(GrammarConstraintTest, EosOnlyWhenCompleteAndNoSpecialTokens) {
  auto c = GrammarConstraint::Create("root ::= \"ab\"+", Vocab());
  ASSERT_TRUE(c.ok()) << c.status();
  grammar::GrammarState s = *(*c)->Start();
  // 'a' and the plain "ab" token (258): not EOS, not the special 257; 259 is past the
  // vocabulary and masked too.
  EXPECT_EQ(Allowed(**c, s), (std::vector<int32_t>{'a', 258}));
  ASSERT_TRUE((*c)->Advance(&s, 258).ok());
  EXPECT_EQ(Allowed(**c, s), (std::vector<int32_t>{'a', kEos, 258}));
  EXPECT_TRUE(s.CanContinue());
  ASSERT_TRUE((*c)->Advance(&s, kEos).ok());  // EOS leaves the state as it is
  EXPECT_EQ(Allowed(**c, s), (std::vector<int32_t>{'a', kEos, 258}));
  EXPECT_EQ((*c)->Advance(&s, 'b').code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*c)->Advance(&s, 400).code(), absl::StatusCode::kInvalidArgument);
}

TEST(GrammarConstraintTest, NothingAllowedIsFailedPrecondition) {
  // A finished grammar ("a" matched, nothing may follow) allows only EOS; without EOS (byte-level
  // models) nothing, which Mask reports rather than sampling from an all -inf row.
  auto c = GrammarConstraint::Create("root ::= \"a\"", Vocab());
  ASSERT_TRUE(c.ok());
  grammar::GrammarState s = *(*c)->Start();
  ASSERT_TRUE((*c)->Advance(&s, 'a').ok());
  EXPECT_FALSE(s.CanContinue());
  std::vector<float> logits(260, 0.f);
  // Complete: only EOS remains.
  ASSERT_TRUE((*c)->Mask(s, logits).ok());
  EXPECT_FALSE(std::isinf(logits[kEos]));
  auto v = std::make_shared<GrammarVocabulary>(*Vocab());
  v->eos_ids.clear();  // a byte-level model: no EOS, nothing allowed once finished
  auto no_eos = GrammarConstraint::Create("root ::= \"a\"", v);
  grammar::GrammarState t = *(*no_eos)->Start();
  ASSERT_TRUE((*no_eos)->Advance(&t, 'a').ok());
  EXPECT_EQ((*no_eos)->Mask(t, logits).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(GrammarConstraintTest, BadGrammarNamesTheError) {
  auto c = GrammarConstraint::Create("root ::= \"unterminated", Vocab());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message().substr(0, 14), "grammar: GBNF ") << c.status();
}

TEST(GrammarCacheTest, CompilesEachSourceOnceWithinCapacity) {
  int builds = 0;
  GrammarCache cache(
      [&] { return absl::StatusOr<std::shared_ptr<const GrammarVocabulary>>(Vocab(&builds)); },
      /*capacity=*/2);
  auto a = cache.Get("root ::= \"a\"");
  auto a2 = cache.Get("root ::= \"a\"");
  ASSERT_TRUE(a.ok() && a2.ok());
  EXPECT_EQ(a->get(), a2->get());
  EXPECT_EQ(cache.compiled(), 1u);
  ASSERT_TRUE(cache.Get("root ::= \"b\"").ok());
  ASSERT_TRUE(cache.Get("root ::= \"a\"").ok());  // a is now the most recent
  ASSERT_TRUE(cache.Get("root ::= \"c\"").ok());  // drops b
  EXPECT_EQ(cache.compiled(), 3u);
  ASSERT_TRUE(cache.Get("root ::= \"a\"").ok());
  EXPECT_EQ(cache.compiled(), 3u);
  ASSERT_TRUE(cache.Get("root ::= \"b\"").ok());
  EXPECT_EQ(cache.compiled(), 4u);
  EXPECT_EQ(builds, 1);  // the vocabulary is built once
  EXPECT_EQ(cache.Get("root ::= (").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace flatstate
