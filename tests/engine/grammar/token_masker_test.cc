// Token masks from the vocabulary trie walk must equal a brute-force check of every token
// (GrammarState::Accepts on its bytes), along random constrained generations.
#include "engine/grammar/token_masker.h"

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/grammar/compiled_grammar.h"
#include "engine/grammar/grammar_state.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/vocab_trie.h"
#include "gtest/gtest.h"

namespace flatstate::grammar {
namespace {

// 5000 tokens: all 256 single bytes, then random pieces of JSON-ish text, whole and split UTF-8
// characters; ids 0 and 1 are EOS and another special token (their text must not matter).
std::vector<std::string> SyntheticVocabulary(size_t n, uint64_t seed) {
  const std::vector<std::string> pieces = {"{",     "}",    "[",        "]",
                                           ":",     ",",    "\"",       "\\",
                                           " ",     "\n",   "\t",       "true",
                                           "false", "null", "0",        "1",
                                           "2",     "5",    "9",        "-",
                                           "+",     ".",    "e",        "E",
                                           "a",     "b",    "n",        "x",
                                           "y",     "z",    "name",     "id",
                                           "\\n",   "\\u",  "00",       "e9",
                                           "(",     ")",    "*",        "/",
                                           "é",     "中",   "ひ",       "\xF0\x9F\x98\x80",
                                           "\xC3",  "\xA9", "\xE4\xB8", "\xAD",
                                           "\x80",  "\xFF", "T",        "Z",
                                           "@",     "_"};
  std::mt19937_64 rng(seed);
  std::vector<std::string> vocab = {"<eos>", "<|im_start|>"};
  for (int b = 0; b < 256; ++b) vocab.push_back(std::string(1, static_cast<char>(b)));
  while (vocab.size() < n) {
    std::string t;
    const size_t parts = 1 + rng() % 4;
    for (size_t i = 0; i < parts; ++i) t += pieces[rng() % pieces.size()];
    vocab.push_back(t);
  }
  return vocab;
}

TokenMask BruteForce(const GrammarState& state, const std::vector<std::string>& vocab,
                     const std::vector<int32_t>& eos, const std::vector<int32_t>& special) {
  TokenMask mask(vocab.size());
  for (size_t id = 0; id < vocab.size(); ++id) {
    bool is_special = false;
    for (int32_t s : special) is_special |= static_cast<size_t>(s) == id;
    if (!is_special && !vocab[id].empty() && state.Accepts(vocab[id])) {
      mask.Allow(static_cast<int32_t>(id));
    }
  }
  if (state.IsComplete()) {
    for (int32_t id : eos) mask.Allow(id);
  }
  return mask;
}

void CheckAlongGenerations(const std::string& gbnf, int generations, int max_steps) {
  auto grammar = CompiledGrammar::FromGbnf(gbnf);
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  const std::vector<std::string> vocab = SyntheticVocabulary(5000, 7);
  const std::vector<int32_t> eos = {0}, special = {0, 1};
  auto trie = VocabularyTrie::Build(vocab, special);
  ASSERT_TRUE(trie.ok()) << trie.status();
  TokenMasker masker(*grammar, *trie);
  // The fast path with other cuts and no whole-state cache must agree too.
  TokenMaskerOptions one_frame, two_frames;
  one_frame.key_frames = 1;
  one_frame.cache_states = false;
  two_frames.key_frames = 2;
  two_frames.cache_states = false;
  TokenMasker masker1(*grammar, *trie, one_frame), masker2(*grammar, *trie, two_frames);
  std::mt19937_64 rng(11);
  for (int gen = 0; gen < generations; ++gen) {
    auto state = GrammarState::Start(*grammar);
    ASSERT_TRUE(state.ok());
    for (int step = 0; step < max_steps; ++step) {
      TokenMask walked, cached, cut1, cut2;
      ASSERT_TRUE(masker.ComputeMaskUncached(*state, eos, &walked).ok());
      ASSERT_TRUE(masker.ComputeMask(*state, eos, &cached).ok());
      ASSERT_TRUE(masker1.ComputeMask(*state, eos, &cut1).ok());
      ASSERT_TRUE(masker2.ComputeMask(*state, eos, &cut2).ok());
      const TokenMask slow = BruteForce(*state, vocab, eos, special);
      ASSERT_EQ(walked.words(), slow.words()) << "generation " << gen << " step " << step;
      ASSERT_EQ(cached.words(), slow.words()) << "generation " << gen << " step " << step;
      ASSERT_EQ(cut1.words(), slow.words()) << "generation " << gen << " step " << step;
      ASSERT_EQ(cut2.words(), slow.words()) << "generation " << gen << " step " << step;
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < static_cast<int32_t>(vocab.size()); ++id) {
        if (slow.allowed(id)) allowed.push_back(id);
      }
      ASSERT_FALSE(allowed.empty()) << "dead end at step " << step;
      const int32_t pick = allowed[rng() % allowed.size()];
      if (pick == 0) break;  // EOS
      ASSERT_TRUE(state->Advance(vocab[static_cast<size_t>(pick)]).ok());
    }
  }
  EXPECT_GT(masker.cache_hits() + masker.cache_misses(), 0u);
}

TEST(TokenMaskerTest, JsonObjectMatchesBruteForce) {
  CheckAlongGenerations(JsonObjectGbnf(), 6, 40);
}

TEST(TokenMaskerTest, ArithmeticMatchesBruteForce) {
  CheckAlongGenerations(R"gbnf(root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" expr ")" | "-" factor
)gbnf",
                        6, 30);
}

TEST(TokenMaskerTest, Utf8ClassesMatchBruteForce) {
  CheckAlongGenerations("root ::= ([ぁ-ゟ] | [^a-z\\x00-\\x7F] | \"é\" | [a-c]){1,12} \"x\"", 6,
                        20);
}

TEST(TokenMaskerTest, SchemaGrammarMatchesBruteForce) {
  auto gbnf = JsonSchemaTextToGbnf(R"({"type":"object","properties":{
      "name":{"type":"string","maxLength":6},"age":{"type":"integer","minimum":-5,"maximum":120},
      "tags":{"type":"array","items":{"enum":["a","b\u00e9",1]},"maxItems":3},
      "when":{"type":"string","format":"date"}},
      "required":["name"],"additionalProperties":false})");
  ASSERT_TRUE(gbnf.ok()) << gbnf.status();
  CheckAlongGenerations(*gbnf, 8, 40);
}

TEST(TokenMaskerTest, NearTheDepthLimitMatchesBruteForce) {
  auto grammar = CompiledGrammar::FromGbnf(JsonObjectGbnf());
  ASSERT_TRUE(grammar.ok());
  const std::vector<std::string> vocab = SyntheticVocabulary(5000, 5);
  auto trie = VocabularyTrie::Build(vocab, {0, 1});
  ASSERT_TRUE(trie.ok());
  GrammarLimits limits;
  limits.max_depth = 14;
  TokenMasker masker(*grammar, *trie);
  const std::string doc = "{\"a\": [[[{\"b\": [[\"x\", 1], {\"c\": [[[[]]]]}]}]]]}";
  for (size_t n = 0; n <= doc.size(); ++n) {
    auto state = GrammarState::Start(*grammar, limits);
    ASSERT_TRUE(state.ok());
    if (!state->Advance(doc.substr(0, n)).ok()) break;  // deeper than the limit allows
    TokenMask fast, walked;
    ASSERT_TRUE(masker.ComputeMask(*state, {0}, &fast).ok());
    ASSERT_TRUE(masker.ComputeMaskUncached(*state, {0}, &walked).ok());
    const TokenMask slow = BruteForce(*state, vocab, {0}, {0, 1});
    ASSERT_EQ(fast.words(), slow.words()) << n;
    ASSERT_EQ(walked.words(), slow.words()) << n;
  }
}

// A state restored from a checkpoint gets the same masks as the one it was taken from.
TEST(TokenMaskerTest, RestoredStateMasksAgree) {
  auto grammar = CompiledGrammar::FromGbnf(JsonObjectGbnf());
  ASSERT_TRUE(grammar.ok());
  const std::vector<std::string> vocab = SyntheticVocabulary(5000, 9);
  auto trie = VocabularyTrie::Build(vocab, {0, 1});
  ASSERT_TRUE(trie.ok());
  TokenMasker masker(*grammar, *trie);
  const std::string doc = "{\"k\": [\"\xE4\xB8\xAD\", 12.5e3, {\"x\": true}], \"z\": null}";
  for (size_t n = 0; n <= doc.size(); ++n) {
    auto state = GrammarState::Start(*grammar);
    ASSERT_TRUE(state.ok() && state->Advance(doc.substr(0, n)).ok()) << n;
    auto restored = GrammarState::Deserialize(*grammar, state->Serialize());
    ASSERT_TRUE(restored.ok()) << restored.status();
    TokenMask a, b;
    ASSERT_TRUE(masker.ComputeMaskUncached(*state, {0}, &a).ok());
    ASSERT_TRUE(masker.ComputeMask(*restored, {0}, &b).ok());
    ASSERT_EQ(a.words(), b.words()) << n;
  }
}

TEST(TokenMaskerTest, EosOnlyWhenComplete) {
  auto grammar = CompiledGrammar::FromGbnf("root ::= \"ab\" \"c\"?");
  ASSERT_TRUE(grammar.ok());
  auto trie = VocabularyTrie::Build({"<eos>", "a", "ab", "abc", "b", "c", ""}, {0});
  ASSERT_TRUE(trie.ok());
  TokenMasker masker(*grammar, *trie);
  auto state = GrammarState::Start(*grammar);
  ASSERT_TRUE(state.ok());
  TokenMask mask;
  ASSERT_TRUE(masker.ComputeMask(*state, {0}, &mask).ok());
  EXPECT_FALSE(mask.allowed(0));
  EXPECT_TRUE(mask.allowed(1) && mask.allowed(2) && mask.allowed(3));
  EXPECT_FALSE(mask.allowed(4) || mask.allowed(5) || mask.allowed(6));
  ASSERT_TRUE(state->Advance("ab").ok());
  ASSERT_TRUE(masker.ComputeMask(*state, {0}, &mask).ok());
  EXPECT_TRUE(mask.allowed(0));
  EXPECT_TRUE(mask.allowed(5));
  EXPECT_EQ(mask.CountAllowed(), 2u);
  EXPECT_EQ(masker.ComputeMask(*state, {99}, &mask).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(VocabularyTrie::Build({"a"}, {3}).ok());
  // Applied to logits padded past the vocabulary.
  ASSERT_TRUE(masker.ComputeMask(*state, {0}, &mask).ok());
  std::vector<float> logits(9, 1.0f);
  ApplyTokenMask(mask, logits);
  for (int id = 0; id < 9; ++id) {
    EXPECT_EQ(std::isinf(logits[id]), !(id == 0 || id == 5)) << id;
  }
}

TEST(TokenMaskerTest, ConcurrentMasksAgree) {
  auto grammar = CompiledGrammar::FromGbnf(JsonObjectGbnf());
  ASSERT_TRUE(grammar.ok());
  const std::vector<std::string> vocab = SyntheticVocabulary(5000, 3);
  auto trie = VocabularyTrie::Build(vocab, {0, 1});
  ASSERT_TRUE(trie.ok());
  TokenMaskerOptions small;
  small.cache_entries = 4;
  TokenMasker masker(*grammar, *trie, small);
  auto state = GrammarState::Start(*grammar);
  ASSERT_TRUE(state.ok() && state->Advance("{\"a\": [1, \"x").ok());
  TokenMask expected;
  ASSERT_TRUE(masker.ComputeMaskUncached(*state, {0}, &expected).ok());
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        TokenMask m;
        if (!masker.ComputeMask(*state, {0}, &m).ok() || m.words() != expected.words()) {
          ++mismatches[t];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(mismatches[t], 0);
}

}  // namespace
}  // namespace flatstate::grammar
