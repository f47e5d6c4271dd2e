// Softmax engines with a bf16 K/V cache (EngineOptions::kv_dtype): half the KV bytes per token,
// a session's outputs bit-identical whatever shares its step or however its prompt is split,
// checkpoints that continue exactly on an engine with the same cache type and are refused by
// one with the other, and logits close to the f32 cache's.
#include <cmath>
#include <string>

#include "engine/runtime/engine.h"
#include "gtest/gtest.h"
#include "tests/engine/runtime/engine_test_util.h"

namespace flatstate::testing {
namespace {

class KvDtypeTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = RandomModelDir(AttentionKind::kSoftmax); }
  std::unique_ptr<Engine> Make(KvDtype dtype, int threads = 2) {
    EngineOptions o;
    o.threads = threads;
    o.kv_blocks = 512;
    o.kv_dtype = dtype;
    return MakeEngineWith(dir_, o);
  }
  std::string dir_;
};

TEST_F(KvDtypeTest, HalfTheBytesPerToken) {
  auto bf = Make(KvDtype::kBf16);
  auto f32 = Make(KvDtype::kF32);
  EXPECT_EQ(f32->kv_bytes_per_token(), f32->config().kv_bytes_per_token());
  EXPECT_EQ(2 * bf->kv_bytes_per_token(), f32->kv_bytes_per_token());
  EXPECT_EQ(2 * bf->kv_pool()->bytes_total(), f32->kv_pool()->bytes_total());
  SessionState s = bf->NewSession({});
  GenerateAlone(bf.get(), &s, Tokens(100, 2), 1);
  EXPECT_EQ(bf->SessionBytes(s), s.kv_blocks.size() * bf->kv_pool()->bytes_per_block());
  bf->ReleaseSession(&s);
}

TEST_F(KvDtypeTest, BatchAndBudgetInvariance) {
  auto e = Make(KvDtype::kBf16);
  for (SamplingParams sp : {SamplingParams{0.f, 0, 1.f, 0}, SamplingParams{0.9f, 40, 0.95f, 11}}) {
    SessionState alone = e->NewSession(sp);
    const auto prompt = Tokens(45, 1);
    const auto expect = GenerateAlone(e.get(), &alone, prompt, 30);
    e->ReleaseSession(&alone);
    SessionState s = e->NewSession(sp);
    ASSERT_TRUE(e->Append(&s, prompt).ok());
    EXPECT_EQ(GenerateInCrowd(e.get(), &s, 30, 12), expect) << "temperature " << sp.temperature;
    e->ReleaseSession(&s);
    for (int64_t budget : {1, 16, 40}) {
      SessionState b = e->NewSession(sp);
      EXPECT_EQ(GenerateAlone(e.get(), &b, prompt, 30, budget), expect) << "budget " << budget;
      e->ReleaseSession(&b);
    }
  }
}

TEST_F(KvDtypeTest, CheckpointContinuesExactlyOnTheSameCacheTypeOnly) {
  auto e = Make(KvDtype::kBf16);
  SessionState s = e->NewSession(SamplingParams{0.8f, 0, 1.f, 42});
  GenerateAlone(e.get(), &s, Tokens(30, 3), 10);
  auto blob = e->Checkpoint(s);
  ASSERT_TRUE(blob.ok()) << blob.status();
  const auto expect = GenerateAlone(e.get(), &s, {}, 20);

  auto e2 = Make(KvDtype::kBf16, /*threads=*/1);
  EXPECT_EQ(e2->fingerprint(), e->fingerprint());
  auto restored = e2->Restore(*blob);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(GenerateAlone(e2.get(), &*restored, {}, 20), expect);

  auto f32 = Make(KvDtype::kF32);
  EXPECT_EQ(e->fingerprint(), f32->fingerprint() + "-kv-bf16");
  EXPECT_EQ(f32->Restore(*blob).status().code(), absl::StatusCode::kFailedPrecondition);
  e->ReleaseSession(&s);
  e2->ReleaseSession(&*restored);
}

// Relative L2 error of all logits of a 200-token prompt against the f32 cache's.
TEST_F(KvDtypeTest, LogitsCloseToF32) {
  auto e = Make(KvDtype::kBf16);
  auto f32 = Make(KvDtype::kF32);
  const auto prompt = Tokens(200, 8);
  SessionState a = e->NewSession({}), b = f32->NewSession({});
  auto got = e->Score(&a, prompt);
  auto want = f32->Score(&b, prompt);
  ASSERT_TRUE(got.ok() && want.ok());
  ASSERT_EQ(got->size(), want->size());
  EXPECT_NE(*got, *want) << "the bf16 cache should round something";
  const double rel = RelativeL2Error(*got, *want);
  EXPECT_LE(rel, 0.01);
  RecordProperty("logit_rel_err", std::to_string(rel));
  e->ReleaseSession(&a);
  f32->ReleaseSession(&b);
}

TEST(KvDtypeErrors, UnknownNameAndCuda) {
  EXPECT_EQ(ParseKvDtype("fp8").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseKvDtype("bf16"), KvDtype::kBf16);
  if (!CheckDevice(Device::kCuda).ok()) GTEST_SKIP() << CheckDevice(Device::kCuda);
  auto model = Model::Load(RandomModelDir(AttentionKind::kSoftmax));
  ASSERT_TRUE(model.ok());
  EngineOptions o;
  o.device = Device::kCuda;
  o.kv_dtype = KvDtype::kBf16;
  auto e = Engine::Create(std::move(*model), o);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kUnimplemented) << e.status();
}

}  // namespace
}  // namespace flatstate::testing
