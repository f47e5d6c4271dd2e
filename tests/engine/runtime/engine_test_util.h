// Helpers for engine tests: random-weight models of every attention kind written to temp folders.
#ifndef FLATSTATE_TESTS_ENGINE_RUNTIME_ENGINE_TEST_UTIL_H_
#define FLATSTATE_TESTS_ENGINE_RUNTIME_ENGINE_TEST_UTIL_H_

#include <memory>
#include <string>
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

inline std::unique_ptr<Engine> MakeEngine(const std::string& dir, int threads = 2,
                                          int kv_blocks = 512) {
  auto model = Model::Load(dir);
  EXPECT_TRUE(model.ok()) << model.status();
  EngineOptions o;
  o.threads = threads;
  o.kv_blocks = kv_blocks;
  auto e = Engine::Create(std::move(*model), o);
  EXPECT_TRUE(e.ok()) << e.status();
  return std::move(*e);
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

inline const std::vector<AttentionKind>& AllKinds() {
  static const std::vector<AttentionKind> k = {AttentionKind::kSoftmax, AttentionKind::kLinearElu,
                                               AttentionKind::kCosformer, AttentionKind::kCosine,
                                               AttentionKind::kFavor};
  return k;
}

inline std::string KindName(const ::testing::TestParamInfo<AttentionKind>& info) {
  return std::string(AttentionKindName(info.param));
}

}  // namespace flatstate::testing

#endif  // FLATSTATE_TESTS_ENGINE_RUNTIME_ENGINE_TEST_UTIL_H_
