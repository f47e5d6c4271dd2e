// Qwen3.5's text model (engine/arch/qwen35_arch.h): Gated DeltaNet layers and gated softmax
// layers, on tests/data/hf_qwen35_tiny (tools/hf_qwen35.py: 3 Gated DeltaNet layers then one
// full-attention layer, 2 key / 4 value heads, partial rotary, tied head, BF16), against the
// float64 PyTorch reference (tools/flatstate_ref/qwen35.py; its logits at 8 positions across the
// first chunk boundary, 64 greedy tokens) and llama.cpp's greedy tokens on the same folder
// (converted by its own convert_hf_to_gguf.py; README.md there).
#include <algorithm>
#include <cmath>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "engine/runtime/engine.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/runtime/engine_test_util.h"

namespace flatstate::testing {
namespace {

const std::string kTiny = std::string(FLATSTATE_SOURCE_DIR) + "/tests/data/hf_qwen35_tiny";

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return nlohmann::json::parse(f);
}

TEST(Qwen35Arch, ReadsTheConfigAsPublished) {
  auto m = Model::Load(kTiny);
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = (*m)->config();
  EXPECT_EQ(c.architecture, "qwen3_5");
  EXPECT_EQ(c.delta.key_heads, 2);
  EXPECT_EQ(c.delta.value_heads, 4);
  EXPECT_EQ(c.delta.conv_dim(), 2 * 32 + 64);
  EXPECT_EQ(c.rotary(), 8);
  EXPECT_TRUE(c.attn_output_gate);
  for (int l = 0; l < 3; ++l) EXPECT_TRUE(c.layer_attention(l).delta) << l;
  EXPECT_TRUE(c.layer_attention(3).softmax);
  EXPECT_TRUE(c.has_kv());
  EXPECT_EQ(c.kv_layers(), 1);
  // Per session: 3 x (S 4 x 16 x 16 + window 3 x 128) floats, whatever the context.
  EXPECT_EQ(c.state_floats(), 3u * (4 * 16 * 16 + 3 * 128));
  EXPECT_EQ(c.kv_bytes_per_token(), 2u * 1 * 32 * 4);
  EXPECT_TRUE((*m)->ignored_config_keys().empty());
}

// Logits at the golden positions within 1e-3 of the logit range of the float64 reference, its 64
// greedy tokens, and llama.cpp's 64 greedy tokens; f32 and the file's own bf16.
TEST(Qwen35Arch, MatchesTheReferenceAndLlamaCpp) {
  for (WeightDtype dtype : {WeightDtype::kF32, WeightDtype::kBf16}) {
    auto e = MakeEngine(kTiny, 2, 64, dtype);
    ASSERT_NE(e, nullptr);
    const int V = e->config().vocab_size;
    const nlohmann::json g = ReadJson(kTiny + "/golden_reference.json");
    const auto prompt = g["prompt"].get<std::vector<int32_t>>();
    const auto positions = g["positions"].get<std::vector<int32_t>>();
    const auto want = g["logits"].get<std::vector<std::vector<float>>>();
    const double range = g["logit_max"].get<double>() - g["logit_min"].get<double>();
    SessionState s = e->NewSession({});
    auto logits = e->Score(&s, prompt);
    ASSERT_TRUE(logits.ok()) << logits.status();
    double worst = 0;
    for (size_t i = 0; i < positions.size(); ++i) {
      for (int v = 0; v < V; ++v) {
        worst = std::max(worst, std::abs(double{(*logits)[positions[i] * V + v]} - want[i][v]));
      }
    }
    EXPECT_LE(worst, 1e-3 * range) << WeightDtypeName(dtype);
    RecordProperty(std::string("max_abs_logit_diff_") + WeightDtypeName(dtype),
                   std::to_string(worst));
    e->ReleaseSession(&s);
    SessionState gen = e->NewSession({});
    const std::vector<int32_t> greedy = GenerateAlone(e.get(), &gen, prompt, 64);
    EXPECT_EQ(greedy, g["greedy"].get<std::vector<int32_t>>()) << WeightDtypeName(dtype);
    const nlohmann::json peer = ReadJson(kTiny + "/golden_llamacpp.json");
    EXPECT_EQ(greedy, peer["greedy"].get<std::vector<int32_t>>()) << "llama.cpp";
    e->ReleaseSession(&gen);
  }
}

// Token by token (the recurrent form) and one prefill (the chunked form) give the same greedy
// continuation; a checkpoint taken mid-generation restores and continues exactly; a session's
// sampled tokens do not depend on the batch.
TEST(Qwen35Arch, FormsCheckpointsAndBatchInvariance) {
  auto e = MakeEngine(kTiny, 2, 256, WeightDtype::kF32);
  ASSERT_NE(e, nullptr);
  const nlohmann::json g = ReadJson(kTiny + "/golden_reference.json");
  const auto prompt = g["prompt"].get<std::vector<int32_t>>();
  SessionState one = e->NewSession({});
  const std::vector<int32_t> want = GenerateAlone(e.get(), &one, prompt, 16);
  SessionState steps = e->NewSession({});
  for (size_t i = 0; i + 1 < prompt.size(); ++i) {
    ASSERT_TRUE(e->Score(&steps, std::span<const int32_t>(&prompt[i], 1)).ok());
  }
  EXPECT_EQ(GenerateAlone(e.get(), &steps, {prompt.back()}, 16), want);

  SessionState s = e->NewSession({.temperature = 0.8f, .top_k = 0, .top_p = 0.95f, .seed = 5});
  GenerateAlone(e.get(), &s, prompt, 10);
  auto blob = e->Checkpoint(s);
  ASSERT_TRUE(blob.ok()) << blob.status();
  const std::vector<int32_t> rest = GenerateAlone(e.get(), &s, {}, 20);
  auto restored = e->Restore(*blob);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(GenerateAlone(e.get(), &*restored, {}, 20), rest);

  SessionState alone = e->NewSession({.temperature = 1.f, .top_k = 0, .top_p = 1.f, .seed = 3});
  const std::vector<int32_t> solo = GenerateAlone(e.get(), &alone, prompt, 24);
  SessionState crowd = e->NewSession({.temperature = 1.f, .top_k = 0, .top_p = 1.f, .seed = 3});
  ASSERT_TRUE(e->Append(&crowd, prompt).ok());
  EXPECT_EQ(GenerateInCrowd(e.get(), &crowd, 24, 3), solo);
}

}  // namespace
}  // namespace flatstate::testing
