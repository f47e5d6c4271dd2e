// Mamba-2 (engine/arch/mamba2_arch.h) on tests/data/hf_mamba2_tiny (tools/hf_mamba2.py: 2 layers,
// 6 heads x 16, state 16, 1 group, conv 4 with bias, tied head, BF16; config.json as transformers
// writes it, time_step_limit [0.0, Infinity] included), against the float64 PyTorch reference
// (tools/flatstate_ref/mamba2.py: logits at 8 positions of an 80-token prompt, the SSM and conv
// state after the prompt, 64 greedy tokens) and llama.cpp's greedy tokens on the same folder
// (converted by its own convert_hf_to_gguf.py; README.md there). Then what the server relies on:
// both forms agree, checkpoints restore exactly, batches do not change a session's tokens, the
// state is as large at 1k tokens as at 2k; and bad configs are refused by key.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "engine/runtime/engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/runtime/engine_test_util.h"

namespace flatstate::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kTiny = std::string(FLATSTATE_SOURCE_DIR) + "/tests/data/hf_mamba2_tiny";

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return nlohmann::json::parse(f);
}

TEST(Mamba2Arch, ReadsTheConfigAsTransformersWritesIt) {
  auto m = Model::Load(kTiny);
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = (*m)->config();
  EXPECT_EQ(c.architecture, "mamba2");
  EXPECT_EQ(c.ssm.heads, 6);
  EXPECT_EQ(c.ssm.head_dim, 16);
  EXPECT_EQ(c.ssm.state_size, 16);
  EXPECT_EQ(c.ssm.groups, 1);
  EXPECT_EQ(c.ssm.conv_dim(), 96 + 2 * 16);
  EXPECT_EQ(c.ssm.dt_min, 0.f);
  EXPECT_TRUE(std::isinf(c.ssm.dt_max));  // "Infinity", Python's literal
  EXPECT_EQ(c.mlp_kind, MlpKind::kNone);
  for (int l = 0; l < 2; ++l) EXPECT_TRUE(c.layer_attention(l).ssm) << l;
  EXPECT_FALSE(c.has_kv());
  EXPECT_TRUE(c.is_linear());
  // Per session: 2 x (S 6 x 16 x 16 + window 3 x 128) floats, whatever the context
  // (tools/flatstate_ref/mamba2.py state_floats: 3840).
  EXPECT_EQ(c.state_floats(), 3840u);
  EXPECT_EQ(c.state_bytes(), 3840u * 4);
  EXPECT_TRUE((*m)->ignored_config_keys().empty());
}

// Logits at the golden positions within 1e-3 of the logit range of the float64 reference, the
// state after the prompt, its 64 greedy tokens and llama.cpp's; f32 and the file's own bf16.
TEST(Mamba2Arch, MatchesTheReferenceAndLlamaCpp) {
  const nlohmann::json g = ReadJson(kTiny + "/golden_reference.json");
  const auto prompt = g["prompt"].get<std::vector<int32_t>>();
  const auto positions = g["positions"].get<std::vector<int32_t>>();
  const auto want = g["logits"].get<std::vector<std::vector<float>>>();
  const double range = g["logit_max"].get<double>() - g["logit_min"].get<double>();
  for (WeightDtype dtype : {WeightDtype::kF32, WeightDtype::kBf16}) {
    auto e = MakeEngine(kTiny, 2, 32, dtype);
    ASSERT_NE(e, nullptr);
    const ModelConfig& c = e->config();
    const int V = c.vocab_size;
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
    // The state: ours S [H][N][P] and window [K-1][conv_dim]; the reference's ssm [H][P][N] and
    // conv [conv_dim][K-1] (oldest first in both).
    e->SyncToHost(&s).IgnoreError();
    const SsmShape& sh = c.ssm;
    const int64_t H = sh.heads, P = sh.head_dim, N = sh.state_size, C = sh.conv_dim();
    const int64_t K1 = sh.conv_kernel - 1;
    double worst_state = 0, scale = 0;
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      const auto ssm = g["state_after_prompt"][l]["ssm"].get<std::vector<double>>();
      const auto conv = g["state_after_prompt"][l]["conv"].get<std::vector<double>>();
      ASSERT_EQ(ssm.size(), size_t(H * P * N));
      ASSERT_EQ(conv.size(), size_t(C * K1));
      const float* S = s.linear.data() + l * sh.state_floats();
      const float* W = S + H * N * P;
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t p = 0; p < P; ++p) {
          for (int64_t n = 0; n < N; ++n) {
            const double r = ssm[(h * P + p) * N + n];
            scale = std::max(scale, std::abs(r));
            worst_state = std::max(worst_state, std::abs(S[(h * N + n) * P + p] - r));
          }
        }
      }
      for (int64_t ch = 0; ch < C; ++ch) {
        for (int64_t t = 0; t < K1; ++t) {
          worst_state = std::max(worst_state, std::abs(W[t * C + ch] - conv[ch * K1 + t]));
        }
      }
    }
    EXPECT_LE(worst_state, 1e-3 * std::max(1.0, scale)) << WeightDtypeName(dtype);
    RecordProperty(std::string("max_abs_state_diff_") + WeightDtypeName(dtype),
                   std::to_string(worst_state));
    e->ReleaseSession(&s);
    SessionState gen = e->NewSession({});
    const std::vector<int32_t> greedy = GenerateAlone(e.get(), &gen, prompt, 64);
    EXPECT_EQ(greedy, g["greedy"].get<std::vector<int32_t>>()) << WeightDtypeName(dtype);
    const nlohmann::json peer = ReadJson(kTiny + "/golden_llamacpp.json");
    EXPECT_EQ(greedy, peer["greedy"].get<std::vector<int32_t>>()) << "llama.cpp";
    e->ReleaseSession(&gen);
  }
}

// Token by token (the recurrent form) and one prefill (the chunked form, 16-token chunks) give the
// same greedy continuation; a checkpoint taken mid-generation restores and continues exactly and
// is as large after 2000 tokens as after 100; a session's sampled tokens do not depend on the
// batch.
TEST(Mamba2Arch, FormsCheckpointsFlatStateAndBatchInvariance) {
  auto e = MakeEngine(kTiny, 2, 16, WeightDtype::kF32);
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
  GenerateAlone(e.get(), &s, prompt, 20);
  auto blob = e->Checkpoint(s);
  ASSERT_TRUE(blob.ok()) << blob.status();
  const std::vector<int32_t> rest = GenerateAlone(e.get(), &s, {}, 20);
  auto restored = e->Restore(*blob);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(GenerateAlone(e.get(), &*restored, {}, 20), rest);
  GenerateAlone(e.get(), &s, {}, 1900);
  EXPECT_GE(s.context_tokens(), 2000);
  auto late = e->Checkpoint(s);
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_EQ(late->size(), blob->size());

  SessionState alone = e->NewSession({.temperature = 1.f, .top_k = 0, .top_p = 1.f, .seed = 3});
  const std::vector<int32_t> solo = GenerateAlone(e.get(), &alone, prompt, 24);
  SessionState crowd = e->NewSession({.temperature = 1.f, .top_k = 0, .top_p = 1.f, .seed = 3});
  ASSERT_TRUE(e->Append(&crowd, prompt).ok());
  EXPECT_EQ(GenerateInCrowd(e.get(), &crowd, 24, 3), solo);
}

// A copy of the tiny folder with config.json's text edited (string replacement, so Python's
// Infinity literal survives).
std::string EditedTiny(const std::string& name, const std::string& from, const std::string& to) {
  const std::string dir = TempDir() + "/mamba2_" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(kTiny)) {
    if (e.is_regular_file()) fs::copy_file(e.path(), dir + "/" + e.path().filename().string());
  }
  std::string text = ReadFile(dir + "/config.json");
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  EXPECT_TRUE(WriteFile(dir + "/config.json", text));
  return dir;
}

TEST(Mamba2Arch, ConfigsThatChangeTheMathAreRefusedByKey) {
  struct Case {
    const char* from;
    const char* to;
    const char* key;
  };
  const Case cases[] = {
      {"\"num_heads\": 6", "\"num_heads\": 5", "'num_heads'"},
      {"\"n_groups\": 1", "\"n_groups\": 4", "'n_groups'"},
      {"\"use_bias\": false", "\"use_bias\": true", "'use_bias'"},
      {"\"rms_norm\": true", "\"rms_norm\": false", "'rms_norm'"},
      {"\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"", "'hidden_act'"},
      {"Infinity\n", "NaN\n", "'time_step_limit'"},
      {"0.0,\n", "-1,\n", "'time_step_limit'"},
      {"\"state_size\": 16", "\"state_size\": 0", "'state_size'"},
  };
  for (const Case& k : cases) {
    const std::string dir = EditedTiny("bad", k.from, k.to);
    const absl::Status st = Model::Load(dir).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << k.to << ": " << st;
    EXPECT_THAT(st.message(), HasSubstr(k.key)) << st;
    EXPECT_THAT(st.message(), HasSubstr("config.json")) << st;
  }
  // A finite clamp is read; "Infinity" inside a string value is not a literal to rewrite.
  const std::string ok = EditedTiny("clamp", "Infinity\n", "100.0\n");
  auto m = Model::Load(ok);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->config().ssm.dt_max, 100.f);
}

// Tensors: a missing conv bias, a wrong in_proj shape and a stray tensor name the tensor.
TEST(Mamba2Arch, TensorsAreCheckedByName) {
  const std::string no_bias =
      EditedTiny("nobias", "\"use_conv_bias\": true", "\"use_conv_bias\": false");
  const absl::Status st = Model::Load(no_bias).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(st.message(), HasSubstr("conv1d.bias")) << st;
  const std::string wide = EditedTiny("wide", "\"state_size\": 16", "\"state_size\": 8");
  const absl::Status st2 = Model::Load(wide).status();
  EXPECT_EQ(st2.code(), absl::StatusCode::kInvalidArgument) << st2;
  EXPECT_THAT(st2.message(), HasSubstr("in_proj.weight")) << st2;
}

}  // namespace
}  // namespace flatstate::testing
