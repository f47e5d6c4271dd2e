// Constrained decoding in the engine (engine_sample.cc, docs/grammar.md) on random-weight byte
// models (256 tokens, no EOS: a grammar ends the output by completing): output always parses and
// validates against its schema (a property test over generated schemas and sampling seeds); a
// checkpoint taken mid-JSON restores, in the same or a fresh engine, and continues bit for bit;
// a constrained session gives the same tokens alone and in any batch; logprobs, n > 1 choices,
// the grammar cache and a v2 checkpoint's failure modes.
// libstdc++ 12's <regex> (the test's oracle) trips a false -Wmaybe-uninitialized inside
// std::function at the sanitizer builds' -O1 (as in json_schema_test.cc).
#if !defined(__clang__)  // clang has no such warning (it builds the sanitizer stage)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <chrono>
#include <cmath>
#include <iostream>
#include <regex>
#include <string>
#include <vector>

#include "engine/grammar/json_schema.h"
#include "engine/runtime/engine.h"
#include "engine/util/crc32c.h"
#include "engine/util/little_endian.h"
#include "gtest/gtest.h"
#include "tests/engine/runtime/engine_test_util.h"
#include "tests/engine/runtime/json_schema_oracle.h"

namespace flatstate::testing {
namespace {

constexpr int kCap = 4000;  // steps; every schema here has far shorter documents

struct Output {
  std::vector<int32_t> tokens;
  bool done = false;  // grammar_done on the last token
};

// Steps `s` alone until its grammar is done or `n` tokens were sampled. With `mask_s`, adds the
// time of computing each step's mask first (the step's own then finds it cached).
struct MaskTime {
  double seconds = 0;
  int64_t masks = 0;
};
Output Generate(Engine* e, SessionState* s, int n = kCap, MaskTime* mask_time = nullptr) {
  Output out;
  std::vector<StepResult> res;
  std::vector<float> row(static_cast<size_t>(e->config().vocab_size));
  while (!out.done && static_cast<int>(out.tokens.size()) < n) {
    if (mask_time != nullptr && s->grammar.has_value() && s->pending.size() == 1) {
      const auto t0 = std::chrono::steady_clock::now();
      EXPECT_TRUE(s->grammar->constraint->Mask(s->grammar->state, row).ok());
      mask_time->seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ++mask_time->masks;
    }
    StepRequest r{s, 1 << 30, true};
    const absl::Status st = e->Step(std::span<const StepRequest>(&r, 1), &res);
    EXPECT_TRUE(st.ok()) << st;
    if (!st.ok()) break;
    if (!res[0].sampled) continue;
    out.tokens.push_back(res[0].token);
    out.done = res[0].grammar_done;
  }
  return out;
}

std::string Text(const std::vector<int32_t>& tokens) {
  std::string s;
  for (int32_t t : tokens) s.push_back(static_cast<char>(t));
  return s;
}

SessionState Constrained(Engine* e, const std::string& gbnf, SamplingParams sp,
                         const std::vector<int32_t>& prompt) {
  SessionState s = e->NewSession(sp);
  absl::StatusOr<SessionGrammar> g = e->StartGrammar(gbnf);
  EXPECT_TRUE(g.ok()) << g.status();
  if (g.ok()) s.grammar = std::move(*g);
  EXPECT_TRUE(e->Append(&s, prompt).ok());
  return s;
}

class EngineGrammarTest : public ::testing::TestWithParam<AttentionKind> {
 protected:
  void SetUp() override {
    dir_ = RandomModelDir(GetParam());
    e_ = MakeEngine(dir_);
    ASSERT_NE(e_, nullptr);
  }
  std::string dir_;
  std::unique_ptr<Engine> e_;
};

// The property: whatever the schema and the seed, the output is complete, parses as JSON and
// validates. Reports the time per constrained token against unconstrained steps.
TEST_P(EngineGrammarTest, OutputAlwaysValidatesAgainstGeneratedSchemas) {
  MaskTime mask_time;
  int64_t constrained_n = 0;
  for (uint64_t schema_seed = 1; schema_seed <= 12; ++schema_seed) {
    SchemaRng rng(schema_seed);
    const nlohmann::ordered_json schema = RandomObjectSchema(&rng);
    absl::StatusOr<std::string> gbnf = grammar::JsonSchemaToGbnf(schema);
    ASSERT_TRUE(gbnf.ok()) << gbnf.status() << " " << schema.dump();
    for (uint64_t seed : {3u, 4u, 5u}) {
      SCOPED_TRACE(schema.dump() + " seed " + std::to_string(seed));
      SessionState s = Constrained(e_.get(), *gbnf, {1.0f, 0, 1.f, seed}, Tokens(20, 1));
      const Output run = Generate(e_.get(), &s, kCap, &mask_time);
      constrained_n += static_cast<int64_t>(run.tokens.size());
      ASSERT_TRUE(run.done) << "not complete after " << kCap << ": " << Text(run.tokens);
      EXPECT_FALSE(s.grammar.has_value());  // cleared once done
      const std::string text = Text(run.tokens);
      const nlohmann::json v = nlohmann::json::parse(text, nullptr, false);
      ASSERT_FALSE(v.is_discarded()) << text;
      EXPECT_EQ(SchemaViolation(schema, v), "") << text;
      e_->ReleaseSession(&s);
    }
  }
  std::cout << "[ timing ] " << AttentionKindName(GetParam()) << ": " << constrained_n
            << " constrained tokens, mask " << 1e6 * mask_time.seconds / mask_time.masks
            << " us per decode step over " << mask_time.masks
            << " steps (the masker's caches as the run left them; 256-token vocabulary)\n";
}

TEST_P(EngineGrammarTest, JsonObjectParsesAndGbnfIsFollowed) {
  for (uint64_t seed : {1u, 2u}) {
    SessionState s =
        Constrained(e_.get(), grammar::JsonObjectGbnf(), {0.7f, 0, 1.f, seed}, Tokens(10, 2));
    const Output run = Generate(e_.get(), &s);
    ASSERT_TRUE(run.done) << Text(run.tokens);
    const nlohmann::json v = nlohmann::json::parse(Text(run.tokens), nullptr, false);
    EXPECT_TRUE(v.is_object()) << Text(run.tokens);
    e_->ReleaseSession(&s);
  }
  SessionState s = Constrained(e_.get(), "root ::= (\"ab\" | [0-9]) [xyz]{2,3} \"!\"",
                               {1.0f, 0, 1.f, 9}, Tokens(10, 2));
  const std::string text = Text(Generate(e_.get(), &s).tokens);
  EXPECT_TRUE(std::regex_match(text, std::regex("(ab|[0-9])[xyz]{2,3}!"))) << text;
  e_->ReleaseSession(&s);
}

// A checkpoint taken mid-JSON restores (same engine, and a fresh engine of the same model) and
// continues exactly as the uninterrupted run.
TEST_P(EngineGrammarTest, MidJsonCheckpointContinuesExactly) {
  SchemaRng rng(7);
  nlohmann::ordered_json schema = {
      {"type", "object"},
      {"properties",
       {{"name", {{"type", "string"}, {"maxLength", 20}}},
        {"tags", RandomSchema(&rng, 1)},
        {"n", {{"type", "integer"}, {"minimum", 0}, {"maximum", 99999}}}}},
      {"required", {"name", "tags", "n"}}};
  const std::string gbnf = *grammar::JsonSchemaToGbnf(schema);
  const SamplingParams sp{0.9f, 0, 1.f, 21};
  SessionState ref = Constrained(e_.get(), gbnf, sp, Tokens(40, 3));
  const Output want = Generate(e_.get(), &ref);
  ASSERT_TRUE(want.done);
  ASSERT_GT(want.tokens.size(), 12u);

  SessionState a = Constrained(e_.get(), gbnf, sp, Tokens(40, 3));
  const Output head = Generate(e_.get(), &a, 8);
  ASSERT_TRUE(a.grammar.has_value());  // mid-JSON
  absl::StatusOr<std::string> blob = e_->Checkpoint(a);
  ASSERT_TRUE(blob.ok()) << blob.status();
  absl::StatusOr<CheckpointHeader> h = ReadCheckpointHeader(*blob);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->version, kCheckpointVersionGrammar);
  const std::vector<int32_t> tail(want.tokens.begin() + 8, want.tokens.end());
  EXPECT_EQ(Generate(e_.get(), &a).tokens, tail);  // the original goes on

  absl::StatusOr<SessionState> b = e_->Restore(*blob);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*e_->Checkpoint(*b), *blob);  // re-serializes to the same bytes
  const Output cont = Generate(e_.get(), &*b);
  EXPECT_TRUE(cont.done);
  EXPECT_EQ(cont.tokens, tail);

  auto fresh = MakeEngine(dir_);  // another engine: its grammar cache is cold
  absl::StatusOr<SessionState> c = fresh->Restore(*blob);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(Generate(fresh.get(), &*c).tokens, tail);
  for (SessionState* s : {&ref, &a, &*b}) e_->ReleaseSession(s);
  fresh->ReleaseSession(&*c);
}

// The same constrained session gives the same tokens alone and batched with others (constrained
// by other grammars, unconstrained, prefilling).
TEST_P(EngineGrammarTest, BatchInvariant) {
  const std::string gbnf = grammar::JsonObjectGbnf();
  const SamplingParams sp{0.8f, 0, 1.f, 33};
  SessionState alone = Constrained(e_.get(), gbnf, sp, Tokens(30, 4));
  const Output want = Generate(e_.get(), &alone, 60);
  SessionState plain_alone = e_->NewSession(sp);
  ASSERT_TRUE(e_->Append(&plain_alone, Tokens(25, 5)).ok());
  const Output plain_want = Generate(e_.get(), &plain_alone, 60);

  SessionState a = Constrained(e_.get(), gbnf, sp, Tokens(30, 4));
  SessionState b = e_->NewSession(sp);
  ASSERT_TRUE(e_->Append(&b, Tokens(25, 5)).ok());
  SessionState c = Constrained(e_.get(), "root ::= [a-z ]+ \".\"", sp, Tokens(70, 6));
  Output got_a, got_b;
  std::vector<StepResult> res;
  while (got_a.tokens.size() < want.tokens.size() || got_b.tokens.size() < 60) {
    std::vector<StepRequest> rs;
    if (got_a.tokens.size() < want.tokens.size()) rs.push_back({&a, 1 << 30, true});
    if (got_b.tokens.size() < 60) rs.push_back({&b, 7, true});
    if (c.grammar.has_value()) rs.push_back({&c, 5, true});
    ASSERT_TRUE(e_->Step(rs, &res).ok());
    for (size_t i = 0; i < rs.size(); ++i) {
      if (!res[i].sampled) continue;
      if (rs[i].session == &a) got_a.tokens.push_back(res[i].token);
      if (rs[i].session == &b) got_b.tokens.push_back(res[i].token);
    }
  }
  EXPECT_EQ(got_a.tokens, want.tokens);
  EXPECT_EQ(got_b.tokens, plain_want.tokens);
  for (SessionState* s : {&alone, &plain_alone, &a, &b, &c}) e_->ReleaseSession(s);
}

// Logprobs come from the masked distribution; n > 1 choices fork the grammar state and each is
// the bits of a session of its own with its seed.
TEST_P(EngineGrammarTest, LogprobsAndChoices) {
  const std::string gbnf = "root ::= \"{\" [a-c]{3} \"}\"";
  const std::vector<int32_t> prompt = Tokens(20, 7);
  SessionState p = Constrained(e_.get(), gbnf, {1.0f, 0, 1.f, 40}, prompt);
  SessionState c41 = e_->NewSession({1.0f, 0, 1.f, 41});
  SessionState c42 = e_->NewSession({1.0f, 0, 1.f, 42});
  SessionState* choices[2] = {&c41, &c42};
  std::vector<StepResult> res;
  StepRequest r{&p, 1 << 30, true};
  r.logprobs = 5;
  r.choices = choices;
  do {  // the prompt runs in chunks; the choices fork at the step that samples
    ASSERT_TRUE(e_->Step(std::span<const StepRequest>(&r, 1), &res).ok());
  } while (!res[0].sampled);
  EXPECT_EQ(res[0].token, '{');
  EXPECT_EQ(res[0].logprobs.logprob, 0.f);  // the only allowed token
  ASSERT_EQ(res[0].logprobs.top.size(), 1u);
  ASSERT_EQ(res[0].choices.size(), 2u);
  for (SessionState* c : choices) {
    ASSERT_TRUE(c->grammar.has_value());
    const Output rest = Generate(e_.get(), c);
    EXPECT_TRUE(rest.done);
    EXPECT_TRUE(std::regex_match(Text(rest.tokens), std::regex("[a-c]{3}\\}")));
  }
  // Choice 42 equals a session of its own seeded 42.
  SessionState solo = Constrained(e_.get(), gbnf, {1.0f, 0, 1.f, 42}, prompt);
  const Output solo_run = Generate(e_.get(), &solo);
  SessionState again = Constrained(e_.get(), gbnf, {1.0f, 0, 1.f, 40}, prompt);
  SessionState d41 = e_->NewSession({1.0f, 0, 1.f, 41});
  SessionState d42 = e_->NewSession({1.0f, 0, 1.f, 42});
  SessionState* more[2] = {&d41, &d42};
  StepRequest r2{&again, 1 << 30, true};
  r2.choices = more;
  do {
    ASSERT_TRUE(e_->Step(std::span<const StepRequest>(&r2, 1), &res).ok());
  } while (!res[0].sampled);
  std::vector<int32_t> got{res[0].choices[1].token};
  const Output d42_rest = Generate(e_.get(), &d42);
  got.insert(got.end(), d42_rest.tokens.begin(), d42_rest.tokens.end());
  EXPECT_EQ(got, solo_run.tokens);
  // Logprobs while inside [a-c]: the top list holds only allowed tokens.
  r2 = StepRequest{&again, 1 << 30, true};
  r2.logprobs = 10;
  ASSERT_TRUE(e_->Step(std::span<const StepRequest>(&r2, 1), &res).ok());
  EXPECT_EQ(res[0].logprobs.top.size(), 3u);
  for (const auto& [id, lp] : res[0].logprobs.top) {
    EXPECT_TRUE(id >= 'a' && id <= 'c') << id;
    EXPECT_TRUE(std::isfinite(lp));
  }
  for (SessionState* s : {&p, &c41, &c42, &solo, &again, &d41, &d42}) e_->ReleaseSession(s);
}

INSTANTIATE_TEST_SUITE_P(Kinds, EngineGrammarTest,
                         ::testing::Values(AttentionKind::kFavor, AttentionKind::kSoftmax,
                                           AttentionKind::kGated),
                         [](const auto& info) {
                           return std::string(AttentionKindName(info.param));
                         });

// A version 2 checkpoint's grammar: cache reuse, a corrupt state, no resolver, a bad grammar.
TEST(EngineGrammarCheckpointTest, GrammarCacheAndFailures) {
  auto e = MakeEngine(RandomModelDir(AttentionKind::kLinearElu));
  ASSERT_NE(e, nullptr);
  auto g1 = e->CompileGrammar("root ::= \"x\"+");
  auto g2 = e->CompileGrammar("root ::= \"x\"+");
  ASSERT_TRUE(g1.ok() && g2.ok());
  EXPECT_EQ(g1->get(), g2->get());  // compiled once
  absl::StatusOr<SessionGrammar> bad = e->StartGrammar("root ::= undefined_rule");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("grammar: GBNF"), absl::string_view::npos) << bad.status();

  SessionState s = Constrained(e.get(), "root ::= \"[\" [0-9]{1,5} \"]\"", {}, Tokens(5, 1));
  Generate(e.get(), &s, 2);
  ASSERT_TRUE(s.grammar.has_value());
  const std::string blob = *e->Checkpoint(s);
  // Without a resolver (RestoreSession alone) a grammar checkpoint is refused.
  SessionState out;
  const CheckpointModel m{e->fingerprint(), e->config()};
  EXPECT_EQ(RestoreSession(m, blob, nullptr, &out).code(), absl::StatusCode::kFailedPrecondition);
  // A flipped byte in the grammar state (the blob's checksum recomputed): DataLoss.
  const std::string state = s.grammar->state.Serialize();
  const size_t at = blob.rfind(state);
  ASSERT_NE(at, std::string::npos);
  std::string bad_blob = blob;
  bad_blob[at + state.size() / 2] ^= 0x40;
  const size_t body = bad_blob.size() - 4;
  StoreLe32(Crc32c(bad_blob.data(), body), bad_blob.data() + body);
  absl::StatusOr<SessionState> r = e->Restore(bad_blob);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
  EXPECT_NE(r.status().message().find("grammar state"), absl::string_view::npos) << r.status();
  // Unconstrained sessions still write version 1.
  SessionState plain = e->NewSession({});
  EXPECT_EQ(ReadCheckpointHeader(*e->Checkpoint(plain))->version, kCheckpointVersion);
  e->ReleaseSession(&s);
}

}  // namespace
}  // namespace flatstate::testing
