// Engine behaviour on random-weight models of every attention kind: chunked prefill vs token by
// token, batch invariance, flat state, KV block accounting, checkpoint continuation, token budgets.
#include "engine/runtime/engine.h"

#include <cmath>
#include <cstring>

#include "gtest/gtest.h"
#include "tests/engine/runtime/engine_test_util.h"

namespace flatstate::testing {
namespace {

class EngineTest : public ::testing::TestWithParam<AttentionKind> {
 protected:
  void SetUp() override { dir_ = RandomModelDir(GetParam()); }
  std::string dir_;
};

TEST_P(EngineTest, ChunkedPrefillEqualsTokenByToken) {
  auto e = MakeEngine(dir_);
  for (size_t n : {15, 16, 17, 31, 32, 33, 70}) {
    const auto prompt = Tokens(n, static_cast<uint32_t>(n));
    SessionState a = e->NewSession({}), b = e->NewSession({});
    auto chunked = e->Score(&a, prompt);
    ASSERT_TRUE(chunked.ok()) << chunked.status();
    std::vector<float> single;
    for (int32_t t : prompt) {
      auto l = e->Score(&b, std::span<const int32_t>(&t, 1));
      ASSERT_TRUE(l.ok()) << l.status();
      single.insert(single.end(), l->begin(), l->end());
    }
    ASSERT_EQ(chunked->size(), single.size());
    double worst = 0;
    for (size_t i = 0; i < single.size(); ++i) {
      worst = std::max(worst, std::abs(double((*chunked)[i]) - single[i]));
    }
    EXPECT_LE(worst, 1e-5) << "prompt length " << n;
    EXPECT_EQ(a.position, b.position);
    if (!a.linear.empty()) {
      for (size_t i = 0; i < a.linear.size(); ++i) {
        if (std::isinf(a.linear[i])) continue;
        ASSERT_NEAR(a.linear[i], b.linear[i], 1e-4 * (1 + std::abs(b.linear[i]))) << i;
      }
    }
    e->ReleaseSession(&a);
    e->ReleaseSession(&b);
  }
}

TEST_P(EngineTest, BatchInvariance) {
  auto e = MakeEngine(dir_);
  for (SamplingParams sp : {SamplingParams{0.f, 0, 1.f, 0}, SamplingParams{0.9f, 40, 0.95f, 11}}) {
    SessionState alone = e->NewSession(sp);
    const auto prompt = Tokens(37, 1);
    const auto expect = GenerateAlone(e.get(), &alone, prompt, 40);
    e->ReleaseSession(&alone);

    // The same session among 16 others with different prompt lengths (prefill and decode mixed),
    // joining at different steps, with a small token budget.
    SessionState s = e->NewSession(sp);
    ASSERT_TRUE(e->Append(&s, prompt).ok());
    EXPECT_EQ(GenerateInCrowd(e.get(), &s, 40, 16), expect) << "temperature " << sp.temperature;
    e->ReleaseSession(&s);
  }
}

TEST_P(EngineTest, TokenBudgetDoesNotChangeOutputs) {
  auto e = MakeEngine(dir_);
  const auto prompt = Tokens(100, 9);
  std::vector<std::vector<int32_t>> outs;
  std::vector<std::string> states;  // checkpoints: the session's state / K/V rows, bit for bit
  for (int64_t budget : {1, 16, 40, 1000}) {
    SessionState s = e->NewSession(SamplingParams{0.8f, 0, 1.f, 5});
    outs.push_back(GenerateAlone(e.get(), &s, prompt, 20, budget));
    auto blob = e->Checkpoint(s);
    ASSERT_TRUE(blob.ok()) << blob.status();
    states.push_back(*std::move(blob));
    e->ReleaseSession(&s);
  }
  for (size_t i = 1; i < outs.size(); ++i) {
    EXPECT_EQ(outs[i], outs[0]);
    EXPECT_TRUE(states[i] == states[0]) << "budget changed the state's bits";
  }
}

TEST_P(EngineTest, CheckpointRestoreContinuesExactly) {
  auto e = MakeEngine(dir_);
  const SamplingParams sp{0.8f, 0, 1.f, 42};
  SessionState s = e->NewSession(sp);
  const auto first = GenerateAlone(e.get(), &s, Tokens(30, 3), 12);
  ASSERT_EQ(first.size(), 12u);
  auto blob = e->Checkpoint(s);
  ASSERT_TRUE(blob.ok()) << blob.status();
  const auto expect = GenerateAlone(e.get(), &s, {}, 25);

  auto e2 = MakeEngine(dir_, /*threads=*/1);  // another engine, another thread count
  auto restored = e2->Restore(*blob);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->context_tokens(), s.context_tokens() - 25);
  const auto got = GenerateAlone(e2.get(), &*restored, {}, 25);
  EXPECT_EQ(got, expect);

  std::string bad = *blob;
  bad[bad.size() / 2] ^= 0x40;
  EXPECT_EQ(e2->Restore(bad).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE(e2->Restore(blob->substr(0, blob->size() - 3)).ok());
}

INSTANTIATE_TEST_SUITE_P(AllKinds, EngineTest, ::testing::ValuesIn(AllKinds()), KindName);

TEST(EngineState, LinearStateBytesFlatFrom10To100kTokens) {
  for (AttentionKind kind : {AttentionKind::kLinearElu, AttentionKind::kCosformer,
                             AttentionKind::kCosine, AttentionKind::kFavor, AttentionKind::kGated,
                             AttentionKind::kWindow, AttentionKind::kHybrid}) {
    auto e = MakeEngine(RandomModelDir(kind));
    SessionState s = e->NewSession({});
    ASSERT_TRUE(e->Append(&s, Tokens(10, 1)).ok());
    std::vector<StepResult> res;
    StepRequest r{&s, 1 << 30, false};
    ASSERT_TRUE(e->Step(std::span<const StepRequest>(&r, 1), &res).ok());
    const size_t at10 = e->SessionBytes(s);
    const size_t vec10 = s.linear.capacity();
    EXPECT_EQ(at10, e->config().state_bytes());
    ASSERT_TRUE(e->Append(&s, Tokens(100000 - 10, 2)).ok());
    while (!s.pending.empty()) {
      r.max_tokens = 4096;
      ASSERT_TRUE(e->Step(std::span<const StepRequest>(&r, 1), &res).ok());
    }
    EXPECT_EQ(s.position, 100000);
    EXPECT_EQ(e->SessionBytes(s), at10) << AttentionKindName(kind);
    EXPECT_EQ(s.linear.capacity(), vec10);
    for (float v : s.linear) ASSERT_FALSE(std::isnan(v)) << AttentionKindName(kind);
  }
}

TEST(EngineState, SoftmaxKvBlocksAreCeilOfTokens) {
  auto e = MakeEngine(RandomModelDir(AttentionKind::kSoftmax), 2, /*kv_blocks=*/64);
  KvBlockPool* pool = e->kv_pool();
  ASSERT_NE(pool, nullptr);
  for (int n : {1, 15, 16, 17, 100, 1000}) {
    SessionState s = e->NewSession({});
    ASSERT_TRUE(e->Score(&s, Tokens(n, n)).ok());
    EXPECT_EQ(static_cast<int>(s.kv_blocks.size()), (n + 15) / 16) << n;
    EXPECT_EQ(pool->blocks_used(), (n + 15) / 16);
    EXPECT_EQ(e->SessionBytes(s), s.kv_blocks.size() * pool->bytes_per_block());
    EXPECT_EQ(pool->bytes_per_block(), 16 * e->config().kv_bytes_per_token());
    e->ReleaseSession(&s);
    EXPECT_EQ(pool->blocks_used(), 0);
  }
  // Exhaustion is a status, the failing request's own; the session that fits keeps working (it
  // runs in the same step).
  SessionState big = e->NewSession({}), small = e->NewSession({});
  ASSERT_TRUE(e->Append(&small, Tokens(12, 1)).ok());
  ASSERT_TRUE(e->Append(&big, Tokens(64 * 16 + 1, 2)).ok());  // first piece: 1024 tokens
  std::vector<StepResult> res;
  StepRequest both[2] = {{&small, 1 << 30, true}, {&big, 1 << 30, true}};
  absl::Status st = e->Step(both, &res);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_EQ(res[1].status.code(), absl::StatusCode::kResourceExhausted) << res[1].status;
  EXPECT_TRUE(big.kv_blocks.empty());
  EXPECT_EQ(big.position, 0);
  EXPECT_EQ(res[1].consumed, 0);
  ASSERT_TRUE(res[0].status.ok()) << res[0].status;
  EXPECT_TRUE(res[0].sampled);
  EXPECT_EQ(small.position, 12);
  EXPECT_EQ(pool->blocks_used(), 1);
  e->ReleaseSession(&small);
  e->ReleaseSession(&big);
}

// Per-request admission: a request that cannot get KV blocks does not run and says why; the
// others run exactly as they would alone.
TEST(EngineStep, KvFailureIsPerRequestAndOthersAreUnaffected) {
  const std::string dir = RandomModelDir(AttentionKind::kSoftmax);
  auto solo = MakeEngine(dir, 2, /*kv_blocks=*/64);
  std::vector<std::vector<int32_t>> expect;
  for (int i = 0; i < 2; ++i) {
    SessionState s = solo->NewSession(SamplingParams{0.8f, 0, 1.f, uint64_t(i)});
    expect.push_back(GenerateAlone(solo.get(), &s, Tokens(10 + i, 50 + i), 12));
    solo->ReleaseSession(&s);
  }
  auto e = MakeEngine(dir, 2, /*kv_blocks=*/8);  // 128 tokens
  SessionState a = e->NewSession(SamplingParams{0.8f, 0, 1.f, 0});
  SessionState b = e->NewSession(SamplingParams{0.8f, 0, 1.f, 1});
  SessionState hog = e->NewSession({});
  ASSERT_TRUE(e->Append(&a, Tokens(10, 50)).ok());
  ASSERT_TRUE(e->Append(&b, Tokens(11, 51)).ok());
  // Its first piece (128 tokens, step_plan.h) needs all 8 blocks: never all free.
  ASSERT_TRUE(e->Append(&hog, Tokens(8 * 16 + 1, 9)).ok());
  std::vector<std::vector<int32_t>> got(2);
  std::vector<StepResult> res;
  int hog_failures = 0;
  while (got[0].size() < 12 || got[1].size() < 12) {
    StepRequest reqs[3] = {{&a, 1 << 30, true}, {&hog, 1 << 30, false}, {&b, 1 << 30, true}};
    (void)e->Step(reqs, &res);
    ASSERT_TRUE(res[0].status.ok()) << res[0].status;
    ASSERT_TRUE(res[2].status.ok()) << res[2].status;
    if (res[0].sampled) got[0].push_back(res[0].token);
    if (res[2].sampled) got[1].push_back(res[2].token);
    if (!res[1].status.ok()) {
      EXPECT_EQ(res[1].status.code(), absl::StatusCode::kResourceExhausted) << res[1].status;
      EXPECT_EQ(hog.position, 0);
      EXPECT_TRUE(hog.kv_blocks.empty());
      ++hog_failures;
    }
  }
  EXPECT_EQ(got, expect);
  EXPECT_GT(hog_failures, 0);
  for (SessionState* s : {&a, &b, &hog}) e->ReleaseSession(s);
  EXPECT_EQ(e->kv_pool()->blocks_used(), 0);
}

// A forward pass that fails rolls back every KV reservation of its step and leaves every session
// as it was; each request that was to run carries the error.
TEST(EngineStep, ForwardFailureRollsBackReservations) {
  auto e = MakeEngine(RandomModelDir(AttentionKind::kSoftmax), 2, /*kv_blocks=*/16);
  SessionState a = e->NewSession({}), bad = e->NewSession({});
  ASSERT_TRUE(e->Append(&a, Tokens(12, 1)).ok());
  ASSERT_TRUE(e->Score(&bad, Tokens(3, 2)).ok());  // holds one block already
  bad.pending = {1, 2, 300};  // bypasses Append: the forward pass rejects token 300
  StepRequest reqs[2] = {{&a, 1 << 30, true}, {&bad, 1 << 30, true}};
  std::vector<StepResult> res;
  EXPECT_FALSE(e->Step(reqs, &res).ok());
  for (const StepResult& r : res) {
    EXPECT_EQ(r.status.code(), absl::StatusCode::kInvalidArgument) << r.status;
    EXPECT_EQ(r.consumed, 0);
    EXPECT_FALSE(r.sampled);
  }
  EXPECT_EQ(e->kv_pool()->blocks_used(), 1);
  EXPECT_TRUE(a.kv_blocks.empty());
  EXPECT_EQ(bad.kv_blocks.size(), 1u);
  EXPECT_EQ(a.position, 0);
  EXPECT_EQ(a.pending.size(), 12u);
  EXPECT_EQ(bad.position, 3);
  EXPECT_EQ(bad.pending.size(), 3u);
  // Without the bad request the same step runs.
  ASSERT_TRUE(e->Step(std::span<const StepRequest>(reqs, 1), &res).ok());
  EXPECT_EQ(a.position, 12);
  e->ReleaseSession(&a);
  e->ReleaseSession(&bad);
}

// A softmax run past max_position_embeddings is that request's own OutOfRange.
TEST(EngineStep, PastMaxPositionIsPerRequest) {
  auto e = MakeEngine(RandomModelDir(AttentionKind::kSoftmax));
  SessionState ok = e->NewSession({}), far = e->NewSession({});
  ASSERT_TRUE(e->Append(&ok, Tokens(5, 1)).ok());
  ASSERT_TRUE(e->Append(&far, Tokens(e->config().max_position_embeddings + 1, 2)).ok());
  StepRequest reqs[2] = {{&far, 1 << 30, true}, {&ok, 1 << 30, true}};
  std::vector<StepResult> res;
  EXPECT_EQ(e->Step(reqs, &res).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(res[0].status.code(), absl::StatusCode::kOutOfRange) << res[0].status;
  EXPECT_TRUE(far.kv_blocks.empty());
  EXPECT_TRUE(res[1].status.ok()) << res[1].status;
  EXPECT_TRUE(res[1].sampled);
  e->ReleaseSession(&ok);
  e->ReleaseSession(&far);
}

// A session named by two requests of one step would run its tokens twice and draw twice from
// one rng (on two threads): the repeat is refused, the first runs as it would alone.
TEST(EngineStep, ASessionTwiceInOneStepIsRefused) {
  auto e = MakeEngine(RandomModelDir(AttentionKind::kLinearElu));
  SessionState alone = e->NewSession(SamplingParams{0.8f, 0, 1.f, 3});
  const auto expect = GenerateAlone(e.get(), &alone, Tokens(9, 4), 1);
  SessionState s = e->NewSession(SamplingParams{0.8f, 0, 1.f, 3});
  ASSERT_TRUE(e->Append(&s, Tokens(9, 4)).ok());
  StepRequest reqs[2] = {{&s, 1 << 30, true}, {&s, 1 << 30, true}};
  std::vector<StepResult> res;
  const absl::Status st = e->Step(reqs, &res);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("request 1: the session is already in an earlier request"),
            std::string::npos)
      << st;
  ASSERT_TRUE(res[0].status.ok()) << res[0].status;
  ASSERT_TRUE(res[0].sampled);
  EXPECT_EQ(std::vector<int32_t>{res[0].token}, expect);
  EXPECT_EQ(res[1].consumed, 0);
  EXPECT_FALSE(res[1].sampled);
  EXPECT_EQ(s.position, 9);
  EXPECT_EQ(s.pending, expect);
  e->ReleaseSession(&alone);
  e->ReleaseSession(&s);
}

TEST(EngineErrors, BadTokensAndDevice) {
  auto e = MakeEngine(RandomModelDir(AttentionKind::kLinearElu));
  SessionState s = e->NewSession({});
  const int32_t bad[] = {1, 256};
  absl::Status st = e->Append(&s, bad);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  // The engine names the token and its index, not a request field (the server names the field).
  EXPECT_NE(st.message().find("token 256 at index 1"), std::string::npos) << st;
  EXPECT_TRUE(s.pending.empty());
  auto model = Model::Load(RandomModelDir(AttentionKind::kLinearElu, 8));
  ASSERT_TRUE(model.ok());
  EngineOptions o;
  o.device = Device::kCuda;
  auto cuda = Engine::Create(std::move(*model), o);
  if (!CudaCompiledIn()) {
    EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition) << cuda.status();
  } else if (!CheckDevice(Device::kCuda).ok()) {
    EXPECT_EQ(cuda.status().code(), absl::StatusCode::kUnavailable) << cuda.status();
  } else {
    EXPECT_TRUE(cuda.ok()) << cuda.status();  // GPU visible: the CUDA forward pass is built
  }
}

}  // namespace
}  // namespace flatstate::testing
