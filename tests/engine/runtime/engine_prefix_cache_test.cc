// The engine's prefix cache (engine.h, "Prefix cache") on every Device and attention kind: a
// 10-turn conversation sent statelessly (each turn a fresh session given the whole history) gives
// the same bits with and without the cache (sampled tokens and their log-probabilities), prefills
// only what follows the previous prompt's last grid point from turn 2 on, and never holds more
// than its budget; softmax entries' KV blocks go back to the pool when admission needs them.
// CUDA instances use EngineOptions::batch_invariant (cuBLAS may round differently for another
// row count, and a restored prompt runs fewer rows) and skip when no GPU is visible.
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "engine/runtime/engine.h"
#include "engine/runtime/step_plan.h"
#include "gtest/gtest.h"
#include "tests/engine/runtime/engine_test_util.h"

namespace flatstate::testing {
namespace {

using Param = DeviceKind;

struct Turn {
  int64_t prompt_tokens = 0;
  int64_t cached = 0;
  std::vector<int32_t> tokens;  // sampled
  std::vector<float> logprobs;  // each sampled token's, then its top 3
  size_t cache_bytes = 0;
};

// One stateless turn: a fresh session (temperature 0.8, seed = turn) gets the whole history,
// generates `reply` tokens with a step budget of `budget`, and is released.
Turn RunTurn(Engine* e, const std::vector<int32_t>& history, int turn, int reply, int64_t budget) {
  Turn t;
  SessionState s = e->NewSession(SamplingParams{0.8f, 0, 1.f, uint64_t(turn)});
  auto cached = e->AppendPrompt(&s, history);
  EXPECT_TRUE(cached.ok()) << cached.status();
  t.prompt_tokens = static_cast<int64_t>(history.size());
  t.cached = cached.value_or(-1);
  std::vector<StepResult> res;
  while (static_cast<int>(t.tokens.size()) < reply) {
    StepRequest r{&s, budget, true, 3};
    const absl::Status st = e->Step(std::span<const StepRequest>(&r, 1), &res);
    EXPECT_TRUE(st.ok()) << st;
    if (!st.ok()) break;
    if (!res[0].sampled) continue;
    t.tokens.push_back(res[0].token);
    t.logprobs.push_back(res[0].logprobs.logprob);
    for (const auto& [id, lp] : res[0].logprobs.top) t.logprobs.push_back(lp);
  }
  e->ReleaseSession(&s);
  t.cache_bytes = e->prefix_cache_stats().bytes;
  return t;
}

// 10 turns; turn i adds a user message of 20 + 7 i tokens to the history, then the reply.
std::vector<Turn> Conversation(Engine* e, int64_t budget = 1 << 30) {
  std::vector<Turn> turns;
  std::vector<int32_t> history;
  for (int i = 0; i < 10; ++i) {
    const auto msg = Tokens(20 + 7 * i, 40 + i);
    history.insert(history.end(), msg.begin(), msg.end());
    turns.push_back(RunTurn(e, history, i, 6, budget));
    history.insert(history.end(), turns.back().tokens.begin(), turns.back().tokens.end());
  }
  return turns;
}

class EnginePrefixCache : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    SKIP_UNLESS_DEVICE(device());
    dir_ = RandomModelDir(std::get<1>(GetParam()));
  }
  Device device() const { return std::get<0>(GetParam()); }
  bool softmax() const { return std::get<1>(GetParam()) == AttentionKind::kSoftmax; }

  std::unique_ptr<Engine> Make(size_t cache_bytes, int kv_blocks = 512) {
    EngineOptions o;
    o.device = device();
    o.threads = 2;
    o.kv_blocks = kv_blocks;
    o.batch_invariant = true;
    o.prefix_cache_bytes = cache_bytes;
    return MakeEngineWith(dir_, o);
  }

  std::string dir_;
};

void ExpectSameBits(const std::vector<Turn>& a, const std::vector<Turn>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << "turn " << i;
    ASSERT_EQ(a[i].logprobs.size(), b[i].logprobs.size()) << "turn " << i;
    EXPECT_EQ(std::memcmp(a[i].logprobs.data(), b[i].logprobs.data(),
                          a[i].logprobs.size() * sizeof(float)),
              0)
        << "turn " << i << ": log-probabilities differ in their bits";
  }
}

TEST_P(EnginePrefixCache, StatelessConversationIsBitwiseTheSameAndPrefillsOnlyTheNewTokens) {
  auto plain = Make(0);
  auto cached = Make(64 << 20);
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(cached, nullptr);
  const std::vector<Turn> want = Conversation(plain.get());
  const std::vector<Turn> got = Conversation(cached.get());
  ExpectSameBits(want, got);
  const int64_t grid = cached->prefix_grid();
  EXPECT_EQ(got[0].cached, 0);
  for (size_t i = 1; i < got.size(); ++i) {
    // Restored: everything up to the last grid point of the previous turn's prompt.
    EXPECT_EQ(got[i].cached, LastGridPoint(got[i - 1].prompt_tokens, grid)) << "turn " << i;
    EXPECT_EQ(want[i].cached, 0);
  }
  const PrefixCacheStats st = cached->prefix_cache_stats();
  EXPECT_EQ(st.hits, 9u);
  EXPECT_EQ(st.misses, 1u);  // the first turn's prompt is longer than one grid step
  int64_t saved = 0;
  for (const Turn& t : got) saved += t.cached;
  EXPECT_EQ(st.tokens_saved, static_cast<uint64_t>(saved));
  EXPECT_GT(st.bytes, 0u);
  EXPECT_EQ(plain->prefix_cache_stats().lookups, 0u);
}

TEST_P(EnginePrefixCache, SmallStepBudgetsGiveTheSameBits) {
  // Prefill split into many steps (on the grid) with and without the cache.
  auto plain = Make(0);
  auto cached = Make(64 << 20);
  ExpectSameBits(Conversation(plain.get(), 1 << 30), Conversation(cached.get(), 5));
}

TEST_P(EnginePrefixCache, NeverHoldsMoreThanItsBudget) {
  auto probe = Make(64 << 20);
  const size_t entry =
      softmax() ? probe->kv_pool()->bytes_per_block() * 4 : probe->model().config().state_bytes();
  const size_t budget = entry * 5 / 2;  // room for two linear states or ~10 KV blocks
  auto e = Make(budget);
  auto plain = Make(0);
  const std::vector<Turn> got = Conversation(e.get());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_LE(got[i].cache_bytes, budget) << "turn " << i;
  }
  ExpectSameBits(Conversation(plain.get()), got);
  const PrefixCacheStats st = e->prefix_cache_stats();
  EXPECT_GT(st.evictions, 0u);
  EXPECT_LE(st.bytes, budget);
  if (!softmax()) {
    EXPECT_LE(st.entries, 2u);
  }
}

TEST_P(EnginePrefixCache, CachedKvBlocksGoBackToThePoolWhenAdmissionNeedsThem) {
  if (!softmax()) GTEST_SKIP() << "linear kinds hold no KV blocks";
  auto e = Make(64 << 20, /*kv_blocks=*/24);
  KvBlockPool* pool = e->kv_pool();
  // A 200-token prompt: 13 blocks while it runs, 12 kept by the cache afterwards.
  RunTurn(e.get(), Tokens(200, 1), 0, 2, 1 << 30);
  EXPECT_GT(pool->blocks_cache_only(), 0);
  EXPECT_EQ(e->KvBlocksAvailable(), pool->blocks_total());
  // Another prompt needing 20 blocks only runs if the cache lets go of its blocks.
  const Turn t = RunTurn(e.get(), Tokens(300, 2), 1, 2, 1 << 30);
  EXPECT_EQ(t.tokens.size(), 2u);
  EXPECT_GT(e->prefix_cache_stats().evictions, 0u);
}

TEST_P(EnginePrefixCache, SoftmaxSharesAnyCommonPrefixOnTheGrid) {
  if (!softmax()) GTEST_SKIP() << "linear kinds snapshot a prompt's last grid point only";
  auto e = Make(64 << 20);
  const int64_t grid = e->prefix_grid();
  std::vector<int32_t> a = Tokens(3 * grid + 5, 1), b = a;
  b.resize(2 * grid + 3);  // shares 2 grid steps and 3 tokens with a
  for (auto& t : std::span<int32_t>(b).subspan(2 * grid)) t = (t + 1) % 256;
  RunTurn(e.get(), a, 0, 1, 1 << 30);
  const Turn t = RunTurn(e.get(), b, 1, 1, 1 << 30);
  EXPECT_EQ(t.cached, 2 * grid);
}

TEST_P(EnginePrefixCache, ABadTokenChangesNothing) {
  auto e = Make(64 << 20);
  SessionState s = e->NewSession({});
  std::vector<int32_t> p = Tokens(100, 3);
  p[70] = 999;
  const auto r = e->AppendPrompt(&s, p);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("token 999 at index 70"), std::string::npos) << r.status();
  EXPECT_TRUE(s.pending.empty());
  EXPECT_EQ(s.position, 0);
  EXPECT_EQ(e->prefix_cache_stats().lookups, 0u);
}

// The Hugging Face recurrent families (a fixed-size state per layer; Qwen3.5 and fla's hybrid
// attn layers with KV blocks beside it): the cache changes no bit of a stateless conversation and
// serves its earlier turns.
TEST(EnginePrefixCacheHf, RecurrentFamiliesReuseTheirPrefixesBitwise) {
  for (const char* name : {"hf_mamba2_tiny", "hf_rwkv7_tiny", "hf_qwen35_tiny", "hf_delta_net_tiny",
                           "hf_gated_deltanet_hybrid_tiny"}) {
    const std::string dir = std::string(FLATSTATE_SOURCE_DIR) + "/tests/data/" + name;
    EngineOptions o;
    o.threads = 2;
    o.kv_blocks = 512;
    o.batch_invariant = true;
    auto plain = MakeEngineWith(dir, o);
    o.prefix_cache_bytes = 64 << 20;
    auto cached = MakeEngineWith(dir, o);
    ASSERT_NE(plain, nullptr) << name;
    ASSERT_NE(cached, nullptr) << name;
    const std::vector<Turn> want = Conversation(plain.get());
    const std::vector<Turn> got = Conversation(cached.get());
    ExpectSameBits(want, got);
    int64_t reused = 0;
    for (const Turn& t : got) reused += t.cached;
    EXPECT_GT(reused, 0) << name;
    EXPECT_GT(cached->prefix_cache_stats().hits, 0u) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(DevicesAndKinds, EnginePrefixCache,
                         ::testing::Combine(::testing::Values(Device::kCpu, Device::kCuda),
                                            ::testing::ValuesIn(AllKinds())),
                         DeviceKindName);

}  // namespace
}  // namespace flatstate::testing
