// Speculative steps (StepRequest::draft, engine.h) on every attention kind and the Hugging Face
// families: a session fed drafts (some right, some wrong at chosen places) draws the same tokens,
// with the same log-probabilities, as one decoding without drafts, and ends in the same state:
// its checkpoint is the same bytes. Greedy and sampled, alone and in a batch with a plain session
// (which is unchanged by it), under a grammar; drafts are ignored where the step cannot verify
// them (a prefill, n > 1 choices) and where the KV pool has no room for them.
#include <string>
#include <vector>

#include "engine/runtime/engine.h"
#include "gtest/gtest.h"
#include "tests/engine/runtime/engine_test_util.h"

namespace flatstate::testing {
namespace {

constexpr SamplingParams kHot{0.9f, 0, 1.f, 5};
constexpr SamplingParams kGreedy{0.f, 0, 1.f, 5};

struct Generated {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprobs> logprobs;
  int drafted = 0, accepted = 0, steps = 0;
};

void ExpectSameLogprobs(const std::vector<TokenLogprobs>& got,
                        const std::vector<TokenLogprobs>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].token, want[i].token) << i;
    EXPECT_EQ(got[i].logprob, want[i].logprob) << i;  // bit for bit
    EXPECT_EQ(got[i].top, want[i].top) << i;
  }
}

// The draft a test drafter proposes after `have` tokens of `want`: the next `k` tokens of the
// plain run, with the one at (have % (k + 2)) replaced by a wrong token (none when that index is
// past the draft), so that drafts are accepted whole, in part and not at all.
std::vector<int32_t> DraftFor(const std::vector<int32_t>& want, size_t have, int k, int vocab) {
  std::vector<int32_t> d;
  for (size_t j = have; j < want.size() && d.size() < static_cast<size_t>(k); ++j) {
    d.push_back(want[j]);
  }
  const size_t wrong = have % static_cast<size_t>(k + 2);
  if (wrong < d.size()) d[wrong] = (d[wrong] + 1) % vocab;
  return d;
}

// Generates at least `n` tokens for `s` after `prompt`; with `want` set, every decoding step
// carries DraftFor(want, ...). `other`, when set, steps in the same batch without a draft.
Generated Generate(Engine* e, SessionState* s, const std::vector<int32_t>& prompt, size_t n,
                   const std::vector<int32_t>* want, SessionState* other = nullptr,
              std::vector<int32_t>* other_tokens = nullptr) {
  Generated g;
  EXPECT_TRUE(e->Append(s, prompt).ok());
  if (other != nullptr) {
    EXPECT_TRUE(e->Append(other, prompt).ok());
  }
  std::vector<StepResult> res;
  std::vector<int32_t> draft;
  while (g.tokens.size() < n) {
    StepRequest r{s, 1 << 30, true};
    r.logprobs = 2;
    if (want != nullptr && !g.tokens.empty()) {
      draft = DraftFor(*want, g.tokens.size(), 4, e->config().vocab_size);
      r.draft = draft;
    }
    std::vector<StepRequest> reqs = {r};
    if (other != nullptr) reqs.push_back(StepRequest{other, 1 << 30, true});
    const absl::Status st = e->Step(reqs, &res);
    EXPECT_TRUE(st.ok()) << st;
    if (!st.ok()) break;
    ++g.steps;
    if (other != nullptr && res[1].sampled) other_tokens->push_back(res[1].token);
    if (!res[0].sampled) continue;
    g.drafted += res[0].drafted;
    g.accepted += static_cast<int>(res[0].accepted.size());
    EXPECT_EQ(res[0].accepted_logprobs.size(), res[0].accepted.size());
    g.tokens.insert(g.tokens.end(), res[0].accepted.begin(), res[0].accepted.end());
    g.logprobs.insert(g.logprobs.end(), res[0].accepted_logprobs.begin(),
                      res[0].accepted_logprobs.end());
    g.tokens.push_back(res[0].token);
    g.logprobs.push_back(res[0].logprobs);
    EXPECT_EQ(res[0].consumed, res[0].drafted > 0 ? 1 + static_cast<int64_t>(res[0].accepted.size())
                                                   : res[0].consumed);
  }
  return g;
}

void ExpectSpeculationExact(Engine* e, const std::string& what) {
  SCOPED_TRACE(what);
  const std::vector<int32_t> prompt = Tokens(37, 3);
  for (const SamplingParams& sampling : {kHot, kGreedy}) {
    SCOPED_TRACE(sampling.temperature);
    SessionState ref = e->NewSession(sampling);
    const Generated plain = Generate(e, &ref, prompt, 48, nullptr);
    ASSERT_EQ(plain.tokens.size(), 48u);

    SessionState spec = e->NewSession(sampling);
    const Generated got = Generate(e, &spec, prompt, 40, &plain.tokens);
    ASSERT_GE(got.tokens.size(), 40u);
    ASSERT_LE(got.tokens.size(), 48u);
    EXPECT_GT(got.accepted, 0);
    EXPECT_LT(got.accepted, got.drafted);  // some drafted tokens were refused
    EXPECT_LT(got.steps, static_cast<int>(plain.steps));
    const size_t n = got.tokens.size();
    EXPECT_EQ(got.tokens, std::vector<int32_t>(plain.tokens.begin(), plain.tokens.begin() + n));
    ExpectSameLogprobs(got.logprobs,
                       std::vector<TokenLogprobs>(plain.logprobs.begin(), plain.logprobs.begin() + n));

    // The state: a plain session stopped after the same tokens checkpoints to the same bytes.
    SessionState same = e->NewSession(sampling);
    Generate(e, &same, prompt, n, nullptr);
    absl::StatusOr<std::string> a = e->Checkpoint(spec);
    absl::StatusOr<std::string> b = e->Checkpoint(same);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_TRUE(*a == *b) << "checkpoints differ after " << n << " tokens";
    e->ReleaseSession(&same);

    // In a batch with a plain session: both give their own bits.
    SessionState spec2 = e->NewSession(sampling);
    SessionState other = e->NewSession({sampling.temperature, 0, 1.f, 99});
    SessionState other_ref = e->NewSession({sampling.temperature, 0, 1.f, 99});
    std::vector<int32_t> other_tokens;
    const Generated crowd = Generate(e, &spec2, prompt, 40, &plain.tokens, &other, &other_tokens);
    const std::vector<int32_t> other_want =
        GenerateAlone(e, &other_ref, prompt, static_cast<int>(other_tokens.size()));
    EXPECT_EQ(other_tokens, other_want);
    EXPECT_EQ(crowd.tokens,
              std::vector<int32_t>(plain.tokens.begin(), plain.tokens.begin() + crowd.tokens.size()));
    for (SessionState* s : {&ref, &spec, &spec2, &other, &other_ref}) e->ReleaseSession(s);
  }
}

class EngineSpeculate : public ::testing::TestWithParam<AttentionKind> {};

TEST_P(EngineSpeculate, DraftsNeverChangeTheOutputOrTheState) {
  EngineOptions o;
  o.threads = 2;
  o.kv_blocks = 256;
  auto e = MakeEngineWith(RandomModelDir(GetParam()), o);
  ASSERT_NE(e, nullptr);
  ExpectSpeculationExact(e.get(), std::string(AttentionKindName(GetParam())));
}

INSTANTIATE_TEST_SUITE_P(Kinds, EngineSpeculate, ::testing::ValuesIn(AllKinds()), KindName);

// Every Hugging Face family: softmax only (Llama), hybrids (Qwen3.5, fla GDN with attention
// layers), the pure recurrences with conv windows and token shifts (Mamba-2, RWKV-7, GLA, DeltaNet).
TEST(EngineSpeculateHf, FamiliesSpeculateExactly) {
  for (const char* name : {"hf_llama_tiny", "hf_qwen35_tiny", "hf_gated_deltanet_hybrid_tiny",
                           "hf_mamba2_tiny", "hf_rwkv7_tiny", "hf_gla_tiny", "hf_delta_net_tiny"}) {
    EngineOptions o;
    o.threads = 2;
    o.kv_blocks = 256;
    auto e = MakeEngineWith(std::string(FLATSTATE_SOURCE_DIR) + "/tests/data/" + name, o);
    ASSERT_NE(e, nullptr) << name;
    ExpectSpeculationExact(e.get(), name);
  }
}

// Under a grammar the drafts are masked like any draw: the same tokens, the same grammar end.
TEST(EngineSpeculateRules, UnderAGrammarTheSameTokens) {
  EngineOptions o;
  o.threads = 2;
  for (AttentionKind kind : {AttentionKind::kLinearElu, AttentionKind::kSoftmax}) {
    auto e = MakeEngineWith(RandomModelDir(kind), o);
    ASSERT_NE(e, nullptr);
    const std::string gbnf = "root ::= \"x\" [a-c]{30} \".\"";
    std::vector<Generated> runs;
    std::vector<int32_t> want;
    for (bool speculate : {false, true}) {
      SessionState s = e->NewSession(kHot);
      absl::StatusOr<SessionGrammar> g = e->StartGrammar(gbnf);
      ASSERT_TRUE(g.ok()) << g.status();
      s.grammar = std::move(*g);
      runs.push_back(Generate(e.get(), &s, Tokens(20, 4), 32, speculate ? &want : nullptr));
      if (!speculate) want = runs.back().tokens;
      EXPECT_FALSE(s.grammar.has_value());  // complete: cleared at its last token
      e->ReleaseSession(&s);
    }
    ASSERT_EQ(runs[0].tokens.size(), 32u);
    EXPECT_EQ(runs[1].tokens, runs[0].tokens);
    ExpectSameLogprobs(runs[1].logprobs, runs[0].logprobs);
    EXPECT_GT(runs[1].accepted, 0);
    EXPECT_EQ(runs[0].tokens.back(), '.');
  }
}

TEST(EngineSpeculateRules, DraftsAreIgnoredWhereTheyCannotBeVerified) {
  EngineOptions o;
  o.threads = 2;
  o.kv_blocks = 8;  // 8 blocks of 16 tokens
  auto e = MakeEngineWith(RandomModelDir(AttentionKind::kSoftmax), o);
  ASSERT_NE(e, nullptr);
  const std::vector<int32_t> draft = {1, 2, 3, 4};
  std::vector<StepResult> res;
  // A prefill (several pending tokens) runs as planned; its draft is ignored.
  SessionState s = e->NewSession(kGreedy);
  ASSERT_TRUE(e->Append(&s, Tokens(20, 1)).ok());
  StepRequest r{&s, 1 << 30, true};
  r.draft = draft;
  ASSERT_TRUE(e->Step(std::span<const StepRequest>(&r, 1), &res).ok());
  EXPECT_EQ(res[0].drafted, 0);
  EXPECT_EQ(res[0].consumed, 16);  // the chunk grid's split, as without a draft
  EXPECT_TRUE(res[0].accepted.empty());
  auto prefill = [&](SessionState* p) {
    do {
      StepRequest q{p, 1 << 30, true};
      ASSERT_TRUE(e->Step(std::span<const StepRequest>(&q, 1), &res).ok());
    } while (!res[0].sampled);
  };
  prefill(&s);  // 20 tokens: 2 blocks
  // No room in the pool for the draft's rows: a plain decode step.
  SessionState big = e->NewSession(kGreedy);
  ASSERT_TRUE(e->Append(&big, Tokens(16 * 6 - 1, 2)).ok());  // 6 blocks: the pool's last
  prefill(&big);
  ASSERT_EQ(e->kv_pool()->blocks_free(), 0);
  StepRequest tight{&big, 1 << 30, true};
  tight.draft = draft;  // its rows would need a new block
  ASSERT_TRUE(e->Step(std::span<const StepRequest>(&tight, 1), &res).ok());
  EXPECT_TRUE(res[0].sampled);
  EXPECT_EQ(res[0].drafted, 0);
  // Out-of-range draft tokens are ignored, not an error.
  const std::vector<int32_t> bad = {e->config().vocab_size};
  StepRequest odd{&s, 1 << 30, true};
  odd.draft = bad;
  ASSERT_TRUE(e->Step(std::span<const StepRequest>(&odd, 1), &res).ok());
  EXPECT_TRUE(res[0].sampled);
  EXPECT_EQ(res[0].drafted, 0);
  // A rejected draft gives its rows' blocks back: the table covers the tokens kept only.
  const std::vector<int32_t> wrong(12, 0);
  StepRequest w{&s, 1 << 30, true};
  w.draft = wrong;
  ASSERT_TRUE(e->Step(std::span<const StepRequest>(&w, 1), &res).ok());
  EXPECT_EQ(res[0].drafted, 0);  // no free block for 12 more rows: ignored
  e->ReleaseSession(&big);
  ASSERT_TRUE(e->Step(std::span<const StepRequest>(&w, 1), &res).ok());
  EXPECT_EQ(res[0].drafted, 12);
  EXPECT_EQ(static_cast<int64_t>(s.kv_blocks.size()), KvBlockPool::BlocksFor(s.position, 16));
  EXPECT_EQ(e->kv_pool()->blocks_used(), static_cast<int>(s.kv_blocks.size()));
  e->ReleaseSession(&s);
}

}  // namespace
}  // namespace flatstate::testing
