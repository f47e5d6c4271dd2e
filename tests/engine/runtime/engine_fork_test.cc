// Engine::Fork (engine.h) on every Device and attention kind, and on the Hugging Face hybrids: a
// fork taken mid-generation continues exactly as the original does (the same tokens, bit for bit,
// run alone or in one batch with the original); n > 1 choices (StepRequest::choices) forked when
// the prompt's first token is drawn give, each, the bits of a separate session with their seed
// that prefilled the whole prompt, under any step budget; softmax forks share the full KV blocks
// and copy only the partly filled one, and every block goes back when both are released.
#include <string>
#include <tuple>
#include <vector>

#include "engine/runtime/engine.h"
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

  // n > 1: choices seeded 11 and 12 drawn in the prompt's sampling step equal separate sessions
  // seeded so; the prompt runs once (the choices run nothing before their first token).
  for (int64_t budget : {int64_t{1} << 30, int64_t{40}}) {
    SessionState p = e->NewSession(kHot);
    ASSERT_TRUE(e->Append(&p, prompt).ok());
    SessionState c11 = e->NewSession({kHot.temperature, 0, 1.f, 11});
    SessionState c12 = e->NewSession({kHot.temperature, 0, 1.f, 12});
    SessionState* choices[2] = {&c11, &c12};
    std::vector<StepResult> res;
    std::vector<int32_t> first;
    int64_t ran = 0;
    while (first.empty()) {
      StepRequest r{&p, budget, true};
      r.choices = choices;
      ASSERT_TRUE(e->Step(std::span<const StepRequest>(&r, 1), &res).ok());
      ran += res[0].consumed;
      if (!res[0].sampled) {
        EXPECT_TRUE(res[0].choices.empty());
        EXPECT_EQ(c11.position, 0);  // untouched until the sampling step
        continue;
      }
      ASSERT_EQ(res[0].choices.size(), 2u);
      for (const ChoiceDraw& d : res[0].choices) {
        ASSERT_TRUE(d.status.ok()) << d.status;
        first.push_back(d.token);
      }
    }
    EXPECT_EQ(ran, static_cast<int64_t>(prompt.size()));
    EXPECT_EQ(c11.position, static_cast<int64_t>(prompt.size()));
    for (int k = 0; k < 2; ++k) {
      const uint64_t seed = 11 + k;
      SessionState alone = e->NewSession({kHot.temperature, 0, 1.f, seed});
      const std::vector<int32_t> want = GenerateAlone(e, &alone, prompt, 12, budget);
      std::vector<int32_t> got = {first[k]};
      const std::vector<int32_t> rest = Continue(e, choices[k], 11);
      got.insert(got.end(), rest.begin(), rest.end());
      EXPECT_EQ(got, want) << "seed " << seed << " budget " << budget;
      e->ReleaseSession(&alone);
      e->ReleaseSession(choices[k]);
    }
    e->ReleaseSession(&p);
  }
  // A choice that is not a fresh session is refused alone; the request still samples.
  SessionState p = e->NewSession(kHot);
  SessionState used = e->NewSession(kHot);
  ASSERT_TRUE(e->Append(&used, prompt).ok());
  ASSERT_TRUE(e->Append(&p, Tokens(10, 9)).ok());
  SessionState* bad[1] = {&used};
  StepRequest r{&p, 1 << 30, true};
  r.choices = bad;
  std::vector<StepResult> out;
  ASSERT_TRUE(e->Step(std::span<const StepRequest>(&r, 1), &out).ok());
  ASSERT_TRUE(out[0].sampled);
  ASSERT_EQ(out[0].choices.size(), 1u);
  EXPECT_EQ(out[0].choices[0].status.code(), absl::StatusCode::kInvalidArgument);
  e->ReleaseSession(&p);
  e->ReleaseSession(&used);
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
