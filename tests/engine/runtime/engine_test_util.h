// Helpers for engine tests: random-weight models of every attention kind written to temp folders.
#ifndef FLATSTATE_TESTS_ENGINE_RUNTIME_ENGINE_TEST_UTIL_H_
#define FLATSTATE_TESTS_ENGINE_RUNTIME_ENGINE_TEST_UTIL_H_

#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "engine/runtime/engine.h"
#include "gtest/gtest.h"
#include "tests/util/model_writer.h"

namespace flatstate::testing {

inline std::string RandomModelDir(AttentionKind kind, uint64_t seed = 7) {
  const std::string dir = TempDir() + "/" + std::string(AttentionKindName(kind));
  auto st = WriteRandomModel(dir, SmallConfig(kind), seed);
  EXPECT_TRUE(st.ok()) << st.status();
  return dir;
}

// Skips the test, naming CheckDevice's reason, when device `d` is not usable here.
#define SKIP_UNLESS_DEVICE(d)                                                              \
  do {                                                                                     \
    const absl::Status fs_dev_st_ = CheckDevice(d);                                        \
    if (!fs_dev_st_.ok()) GTEST_SKIP() << "no CUDA GPU visible: " << fs_dev_st_.message(); \
  } while (0)

// The engine of the model in `dir` with options `o`; null (and a test failure) if it fails.
inline std::unique_ptr<Engine> MakeEngineWith(const std::string& dir, const EngineOptions& o) {
  auto model = Model::Load(dir);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return nullptr;
  auto e = Engine::Create(std::move(*model), o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

inline std::unique_ptr<Engine> MakeEngine(const std::string& dir, int threads = 2,
                                          int kv_blocks = 512,
                                          WeightDtype dtype = WeightDtype::kF32) {
  EngineOptions o;
  o.threads = threads;
  o.kv_blocks = kv_blocks;
  o.weight_dtype = dtype;
  return MakeEngineWith(dir, o);
}

inline std::vector<int32_t> Tokens(size_t n, uint32_t seed) {
  std::vector<int32_t> t(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& v : t) {
    x = x * 1664525u + 1013904223u;
    v = static_cast<int32_t>((x >> 8) % 256);
  }
  return t;
}

// Runs one session alone: appends `prompt`, then generates `n` tokens.
inline std::vector<int32_t> GenerateAlone(Engine* e, SessionState* s,
                                          const std::vector<int32_t>& prompt, int n,
                                          int64_t budget = 1 << 30) {
  EXPECT_TRUE(e->Append(s, prompt).ok());
  std::vector<int32_t> out;
  std::vector<StepResult> res;
  while (static_cast<int>(out.size()) < n) {
    StepRequest r{s, budget, true};
    absl::Status st = e->Step(std::span<const StepRequest>(&r, 1), &res);
    EXPECT_TRUE(st.ok()) << st;
    if (!st.ok()) break;
    if (res[0].sampled) out.push_back(res[0].token);
  }
  return out;
}

// The logits of a fresh session scoring `tokens` fixed tokens (empty on an error, reported).
inline std::vector<float> ScoreLogits(Engine* e, size_t tokens = 48) {
  SessionState s = e->NewSession({});
  auto logits = e->Score(&s, Tokens(tokens, 8));
  EXPECT_TRUE(logits.ok()) << logits.status();
  e->ReleaseSession(&s);
  return logits.ok() ? *logits : std::vector<float>{};
}

// A model file that stores its layer weights as `dtype` (`stored`, at its default type) against
// its F32 original loaded with --weight_dtype `dtype` (`loaded`): the same logits and sampled
// tokens, the fingerprint suffix of the type, and checkpoints that do not cross (another file).
// Returns the stored engine's logits.
inline std::vector<float> ExpectStoredRunsAsItsF32OriginalAtItsType(Engine* stored, Engine* loaded,
                                                                    WeightDtype dtype) {
  EXPECT_EQ(stored->weight_dtype(), dtype);
  const auto logits = ScoreLogits(stored);
  EXPECT_FALSE(logits.empty());
  EXPECT_EQ(logits, ScoreLogits(loaded));
  SessionState a = stored->NewSession({0.8f, 0, 1.f, 5}), b = loaded->NewSession({0.8f, 0, 1.f, 5});
  EXPECT_EQ(GenerateAlone(stored, &a, Tokens(21, 2), 24),
            GenerateAlone(loaded, &b, Tokens(21, 2), 24));
  EXPECT_EQ(stored->fingerprint(),
            stored->model().fingerprint() + "-" + std::string(WeightDtypeName(dtype)));
  EXPECT_NE(stored->fingerprint(), loaded->fingerprint());
  auto blob = loaded->Checkpoint(b);
  EXPECT_TRUE(blob.ok()) << blob.status();
  if (blob.ok()) {
    EXPECT_EQ(stored->Restore(*blob).status().code(), absl::StatusCode::kFailedPrecondition);
  }
  stored->ReleaseSession(&a);
  loaded->ReleaseSession(&b);
  return logits;
}

// Runs session `s` (its prompt already appended) until it has sampled `n` tokens, in steps shared
// with `crowd` other sessions (temperature 0.7, seeds 0..crowd-1) that join one per step with
// prompts of 5 + 9i tokens and a budget of 24 tokens a step (prefill and decode mixed); `s` sits
// in the middle of every batch with an unlimited budget. Returns the tokens `s` sampled.
inline std::vector<int32_t> GenerateInCrowd(Engine* e, SessionState* s, int n, int crowd) {
  std::vector<SessionState> others;
  for (int i = 0; i < crowd; ++i) {
    others.push_back(e->NewSession(SamplingParams{0.7f, 0, 1.f, uint64_t(i)}));
  }
  std::vector<int32_t> got;
  std::vector<StepResult> res;
  for (int step = 0; static_cast<int>(got.size()) < n; ++step) {
    std::vector<StepRequest> reqs;
    for (int i = 0; i < crowd; ++i) {
      if (step == i) {
        EXPECT_TRUE(e->Append(&others[i], Tokens(5 + 9 * i, 100 + i)).ok());
      }
      if (step >= i) reqs.push_back(StepRequest{&others[i], 24, true});
    }
    reqs.insert(reqs.begin() + reqs.size() / 2, StepRequest{s, 1 << 30, true});
    const absl::Status st = e->Step(reqs, &res);
    EXPECT_TRUE(st.ok()) << st;
    if (!st.ok()) break;
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (reqs[i].session == s && res[i].sampled) got.push_back(res[i].token);
    }
  }
  for (auto& o : others) e->ReleaseSession(&o);
  return got;
}

// A 37-token prompt's next 30 tokens, greedy and at temperature 0.9 (top-k 40, top-p 0.95), are
// the same alone and amid a crowd of 12 (GenerateInCrowd): e's outputs do not depend on its batch.
inline void ExpectSameAloneAndInCrowd(Engine* e) {
  for (SamplingParams sp : {SamplingParams{0.f, 0, 1.f, 0}, SamplingParams{0.9f, 40, 0.95f, 11}}) {
    SessionState alone = e->NewSession(sp);
    const auto prompt = Tokens(37, 1);
    const auto expect = GenerateAlone(e, &alone, prompt, 30);
    e->ReleaseSession(&alone);
    SessionState s = e->NewSession(sp);
    EXPECT_TRUE(e->Append(&s, prompt).ok());
    EXPECT_EQ(GenerateInCrowd(e, &s, 30, 12), expect) << "temperature " << sp.temperature;
    e->ReleaseSession(&s);
  }
}

// Relative L2 distance of `got` from `want` (1e9 when their sizes differ).
inline double RelativeL2Error(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    err += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return got.size() == want.size() ? std::sqrt(err / norm) : 1e9;
}

inline const std::vector<AttentionKind>& AllKinds() {
  static const std::vector<AttentionKind> k = {AttentionKind::kSoftmax,   AttentionKind::kLinearElu,
                                               AttentionKind::kCosformer, AttentionKind::kCosine,
                                               AttentionKind::kFavor,     AttentionKind::kGated,
                                               AttentionKind::kWindow,    AttentionKind::kHybrid};
  return k;
}

inline std::string KindName(const ::testing::TestParamInfo<AttentionKind>& info) {
  return std::string(AttentionKindName(info.param));
}

// The parameter of tests instantiated for every (device, attention kind), and its test name.
using DeviceKind = std::tuple<Device, AttentionKind>;
inline std::string DeviceKindName(const ::testing::TestParamInfo<DeviceKind>& info) {
  return std::string(DeviceName(std::get<0>(info.param))) + "_" +
         std::string(AttentionKindName(std::get<1>(info.param)));
}

}  // namespace flatstate::testing

#endif  // FLATSTATE_TESTS_ENGINE_RUNTIME_ENGINE_TEST_UTIL_H_
