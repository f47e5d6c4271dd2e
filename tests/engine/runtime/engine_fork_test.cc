// Engine::Fork (engine.h) on every Device and attention kind, and on the Hugging Face hybrids: a
// fork taken mid-generation continues exactly as the original does (the same tokens, bit for bit,
// run alone or in one batch with the original); a fork taken where the rest of the prompt runs in
// one step (RunsInOneStep, step_plan.h) and re-seeded gives the bits of a separate session with
// that seed that prefilled the whole prompt (what n > 1 relies on); softmax forks share the full
// KV blocks and copy only the partly filled one, and every block goes back when both are released.
#include <string>
#include <tuple>
#include <vector>

#include "engine/runtime/engine.h"
#include "engine/runtime/step_plan.h"
#include "gtest/gtest.h"
#include "tests/engine/runtime/engine_test_util.h"

namespace flatstate::testing {
namespace {

constexpr SamplingParams kHot{0.9f, 0, 1.f, 5};

// Steps `s` (alone) until it has sampled `n` more tokens; the tokens.
std::vector<int32_t> Continue(Engine* e, SessionState* s, int n) {
  std::vector<int32_t> out;
  std::vector<StepResult> res;
  while (static_cast<int>(out.size()) < n) {
    StepRequest r{s, 1 << 30, true};
    const absl::Status st = e->Step(std::span<const StepRequest>(&r, 1), &res);
    EXPECT_TRUE(st.ok()) << st;
    if (!st.ok()) break;
    if (res[0].sampled) out.push_back(res[0].token);
  }
  return out;
}

// Runs `s`'s prompt until the rest of it runs in one step (the n > 1 fork point).
void PrefillToTheForkPoint(Engine* e, SessionState* s, int64_t budget) {
  std::vector<StepResult> res;
  while (!RunsInOneStep(s->position, static_cast<int64_t>(s->pending.size()), e->chunk_size())) {
    StepRequest r{s, budget, false};
    ASSERT_TRUE(e->Step(std::span<const StepRequest>(&r, 1), &res).ok());
    ASSERT_FALSE(res[0].sampled);
  }
}

void ExpectForksBehave(Engine* e, const std::string& what) {
  SCOPED_TRACE(what);
  const std::vector<int32_t> prompt = Tokens(150, 3);
  // Reference: one session, prompt then 30 tokens.
  SessionState ref = e->NewSession(kHot);
  const std::vector<int32_t> want = GenerateAlone(e, &ref, prompt, 30);
  e->ReleaseSession(&ref);

  // Fork after 10 tokens: the original and the fork each give the last 20 (alone, then batched).
  SessionState a = e->NewSession(kHot);
  std::vector<int32_t> head = GenerateAlone(e, &a, prompt, 10);
  ASSERT_EQ(head, std::vector<int32_t>(want.begin(), want.begin() + 10));
  absl::StatusOr<SessionState> b = e->Fork(&a);
  ASSERT_TRUE(b.ok()) << b.status();
  absl::StatusOr<SessionState> c = e->Fork(&a);
  ASSERT_TRUE(c.ok()) << c.status();
  const std::vector<int32_t> tail(want.begin() + 10, want.end());
  EXPECT_EQ(Continue(e, &*b, 20), tail);
  std::vector<int32_t> got_a, got_c;
  std::vector<StepResult> res;
  while (got_a.size() < 20) {
    const StepRequest rs[2] = {{&a, 1 << 30, true}, {&*c, 1 << 30, true}};
    ASSERT_TRUE(e->Step(rs, &res).ok());
    if (res[0].sampled) got_a.push_back(res[0].token);
    if (res[1].sampled) got_c.push_back(res[1].token);
  }
  EXPECT_EQ(got_a, tail);
  EXPECT_EQ(got_c, tail);
  e->ReleaseSession(&a);
  e->ReleaseSession(&*b);
  e->ReleaseSession(&*c);

  // The n > 1 fork point: choices re-seeded 11 and 12 equal separate sessions seeded so.
  for (int64_t budget : {int64_t{1} << 30, int64_t{40}}) {
    SessionState p = e->NewSession(kHot);
    ASSERT_TRUE(e->Append(&p, prompt).ok());
    PrefillToTheForkPoint(e, &p, budget);
    for (uint64_t seed : {11u, 12u}) {
      absl::StatusOr<SessionState> f = e->Fork(&p);
      ASSERT_TRUE(f.ok()) << f.status();
      f->sampling.seed = seed;
      f->rng = Rng(seed);
      SessionState alone = e->NewSession({kHot.temperature, 0, 1.f, seed});
      EXPECT_EQ(Continue(e, &*f, 12), GenerateAlone(e, &alone, prompt, 12, budget))
          << "seed " << seed << " budget " << budget;
      e->ReleaseSession(&*f);
      e->ReleaseSession(&alone);
    }
    e->ReleaseSession(&p);
  }
}

class EngineFork : public ::testing::TestWithParam<DeviceKind> {};

TEST_P(EngineFork, ForksContinueExactly) {
  const Device device = std::get<0>(GetParam());
  SKIP_UNLESS_DEVICE(device);
  EngineOptions o;
  o.device = device;
  o.threads = 2;
  o.kv_blocks = 256;
  o.batch_invariant = true;
  auto e = MakeEngineWith(RandomModelDir(std::get<1>(GetParam())), o);
  ASSERT_NE(e, nullptr);
  ExpectForksBehave(e.get(), std::string(AttentionKindName(std::get<1>(GetParam()))));
}

INSTANTIATE_TEST_SUITE_P(DevicesAndKinds, EngineFork,
                         ::testing::Combine(::testing::Values(Device::kCpu, Device::kCuda),
                                            ::testing::ValuesIn(AllKinds())),
                         DeviceKindName);

class EngineForkSoftmax : public ::testing::TestWithParam<Device> {};

TEST_P(EngineForkSoftmax, ForksShareFullBlocksAndCopyThePartialOne) {
  const Device device = GetParam();
  SKIP_UNLESS_DEVICE(device);
  EngineOptions o;
  o.device = device;
  o.threads = 2;
  o.kv_blocks = 64;
  auto e = MakeEngineWith(RandomModelDir(AttentionKind::kSoftmax), o);
  ASSERT_NE(e, nullptr);
  KvBlockPool* pool = e->kv_pool();
  const int bs = pool->block_size();
  const int before = pool->blocks_used();
  SessionState a = e->NewSession(kHot);
  GenerateAlone(e.get(), &a, Tokens(3 * bs + 5, 4), 2);  // 3 full blocks, then a partial one
  const int used = pool->blocks_used();
  absl::StatusOr<SessionState> b = e->Fork(&a);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(pool->blocks_used(), used + 1);  // only the partial block is copied
  for (int i = 0; i < 3; ++i) EXPECT_EQ(b->kv_blocks[i], a.kv_blocks[i]);
  EXPECT_NE(b->kv_blocks[3], a.kv_blocks[3]);
  e->ReleaseSession(&a);
  EXPECT_EQ(Continue(e.get(), &*b, 3).size(), 3u);  // its shared blocks outlive the original
  e->ReleaseSession(&*b);
  EXPECT_EQ(pool->blocks_used(), before);
}

INSTANTIATE_TEST_SUITE_P(Devices, EngineForkSoftmax,
                         ::testing::Values(Device::kCpu, Device::kCuda),
                         [](const auto& info) { return std::string(DeviceName(info.param)); });

// The Hugging Face families: a hybrid with softmax and recurrent layers (Qwen3.5), Llama's GQA
// K/V, Mamba-2 and RWKV-7 (RWKV carries v_first and the token-shift inputs in its state).
TEST(EngineForkHf, FamiliesForkExactly) {
  for (const char* name : {"hf_qwen35_tiny", "hf_llama_tiny", "hf_mamba2_tiny", "hf_rwkv7_tiny"}) {
    EngineOptions o;
    o.threads = 2;
    o.kv_blocks = 256;
    o.batch_invariant = true;
    auto e = MakeEngineWith(std::string(FLATSTATE_SOURCE_DIR) + "/tests/data/" + name, o);
    ASSERT_NE(e, nullptr) << name;
    ExpectForksBehave(e.get(), name);
  }
}

}  // namespace
}  // namespace flatstate::testing
