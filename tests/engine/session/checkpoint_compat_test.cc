// Checkpoints written by flatstate before the open model layer (main at 2661929, the session
// start of issue 26) for every shipped model: they restore, re-serialize to the same bytes and
// continue with the tokens the old build generated; and the same fixed run on today's engine
// writes exactly those bytes (outputs and checkpoint bytes unchanged). How the fixtures were
// made: tests/data/checkpoints_v1/README.md.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/runtime/engine.h"
#include "gtest/gtest.h"
#include "tests/util/model_writer.h"

namespace flatstate::testing {
namespace {

const std::string kRoot = FLATSTATE_SOURCE_DIR;

std::vector<int32_t> ReadNext(const std::string& path) {
  std::ifstream f(path);
  std::vector<int32_t> out;
  for (int32_t t; f >> t;) out.push_back(t);
  return out;
}

std::unique_ptr<Engine> Load(const std::string& model) {
  auto m = Model::Load(kRoot + "/models/" + model);
  EXPECT_TRUE(m.ok()) << m.status();
  EngineOptions o;
  o.threads = 1;
  o.kv_blocks = 256;
  auto e = Engine::Create(std::move(*m), o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

std::vector<int32_t> Generate(Engine* e, SessionState* s, int n) {
  std::vector<int32_t> got;
  std::vector<StepResult> res;
  while (static_cast<int>(got.size()) < n) {
    StepRequest r{s, 1 << 30, true};
    const absl::Status st = e->Step(std::span<const StepRequest>(&r, 1), &res);
    EXPECT_TRUE(st.ok()) << st;
    if (!st.ok()) break;
    if (res[0].sampled) got.push_back(res[0].token);
  }
  return got;
}

class CheckpointCompat : public ::testing::TestWithParam<std::string> {};

TEST_P(CheckpointCompat, OldCheckpointsRestoreAndTheSameRunWritesTheSameBytes) {
  const std::string base = kRoot + "/tests/data/checkpoints_v1/" + GetParam();
  const std::string old_blob = ReadFile(base + ".ckpt");
  const std::vector<int32_t> old_next = ReadNext(base + ".next");
  ASSERT_FALSE(old_blob.empty());
  ASSERT_EQ(old_next.size(), 16u);
  auto e = Load(GetParam());
  ASSERT_NE(e, nullptr);

  auto restored = e->Restore(old_blob);
  ASSERT_TRUE(restored.ok()) << restored.status();
  auto again = e->Checkpoint(*restored);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(*again == old_blob) << "re-serialized checkpoint differs";
  EXPECT_EQ(Generate(e.get(), &*restored, 16), old_next);
  e->ReleaseSession(&*restored);

  // The fixture's run (its prompt, seed and lengths) on today's engine.
  SessionState s = e->NewSession(SamplingParams{0.8f, 0, 1.f, 7});
  const std::string prompt = "ROMEO:\nBut soft, what light through yonder window breaks?\n";
  ASSERT_TRUE(e->Append(&s, std::vector<int32_t>(prompt.begin(), prompt.end())).ok());
  Generate(e.get(), &s, 24);
  auto blob = e->Checkpoint(s);
  ASSERT_TRUE(blob.ok()) << blob.status();
  EXPECT_TRUE(*blob == old_blob) << "the same run writes other bytes than before";
  e->ReleaseSession(&s);
}

INSTANTIATE_TEST_SUITE_P(
    ShippedModels, CheckpointCompat,
    ::testing::Values("shakespeare-softmax", "shakespeare-linear-elu", "shakespeare-cosformer",
                      "shakespeare-cosine", "shakespeare-favor", "shakespeare-gated",
                      "shakespeare-window", "shakespeare-hybrid"),
    [](const auto& info) {
      std::string n = info.param.substr(std::string("shakespeare-").size());
      for (char& c : n) c = c == '-' ? '_' : c;
      return n;
    });

}  // namespace
}  // namespace flatstate::testing
