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
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/arch/arch_test_util.h"

namespace flatstate::testing {
namespace {

using ::testing::HasSubstr;

const std::string kTiny = std::string(FLATSTATE_SOURCE_DIR) + "/tests/data/hf_mamba2_tiny";

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

// The reference's logits and greedy tokens, llama.cpp's greedy tokens, and the SSM and conv
// state after the prompt (ours S [H][N][P] and window [K-1][conv_dim]; the reference's ssm
// [H][P][N] and conv [conv_dim][K-1], oldest first in both); f32 and the file's own bf16.
TEST(Mamba2Arch, MatchesTheReferenceAndLlamaCpp) {
  const nlohmann::json g = ReadJson(kTiny + "/golden_reference.json");
  ExpectMatchesGolden(kTiny, 32, [&](Engine* e, SessionState* s, WeightDtype dtype) {
    ASSERT_TRUE(e->SyncToHost(s).ok());
    const ModelConfig& c = e->config();
    const SsmShape& sh = c.ssm;
    const int64_t H = sh.heads, P = sh.head_dim, N = sh.state_size, C = sh.conv_dim();
    const int64_t K1 = sh.conv_kernel - 1;
    double worst = 0, scale = 0;
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      const auto ssm = g["state_after_prompt"][l]["ssm"].get<std::vector<double>>();
      const auto conv = g["state_after_prompt"][l]["conv"].get<std::vector<double>>();
      ASSERT_EQ(ssm.size(), size_t(H * P * N));
      ASSERT_EQ(conv.size(), size_t(C * K1));
      const float* S = s->linear.data() + l * sh.state_floats();
      const float* W = S + H * N * P;
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t p = 0; p < P; ++p) {
          for (int64_t n = 0; n < N; ++n) {
            const double r = ssm[(h * P + p) * N + n];
            scale = std::max(scale, std::abs(r));
            worst = std::max(worst, std::abs(S[(h * N + n) * P + p] - r));
          }
        }
      }
      for (int64_t ch = 0; ch < C; ++ch) {
        for (int64_t t = 0; t < K1; ++t) {
          worst = std::max(worst, std::abs(W[t * C + ch] - conv[ch * K1 + t]));
        }
      }
    }
    EXPECT_LE(worst, 1e-3 * std::max(1.0, scale)) << WeightDtypeName(dtype);
    RecordProperty(std::string("max_abs_state_diff_") + WeightDtypeName(dtype),
                   std::to_string(worst));
  });
}

// Recurrent = chunked (16-token chunks), checkpoints, a flat checkpoint size, batch invariance.
TEST(Mamba2Arch, FormsCheckpointsFlatStateAndBatchInvariance) {
  ExpectFormsCheckpointsAndBatchInvariance(kTiny, 16, /*flat_state=*/true);
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
    const std::string dir = EditedCopy(kTiny, "mamba2_bad", k.from, k.to);
    const absl::Status st = Model::Load(dir).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << k.to << ": " << st;
    EXPECT_THAT(st.message(), HasSubstr(k.key)) << st;
    EXPECT_THAT(st.message(), HasSubstr("config.json")) << st;
  }
  // A finite clamp is read; "Infinity" inside a string value is not a literal to rewrite.
  const std::string ok = EditedCopy(kTiny, "mamba2_clamp", "Infinity\n", "100.0\n");
  auto m = Model::Load(ok);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->config().ssm.dt_max, 100.f);
}

// Tensors: a missing conv bias, a wrong in_proj shape and a stray tensor name the tensor.
TEST(Mamba2Arch, TensorsAreCheckedByName) {
  const std::string no_bias =
      EditedCopy(kTiny, "mamba2_nobias", "\"use_conv_bias\": true", "\"use_conv_bias\": false");
  const absl::Status st = Model::Load(no_bias).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(st.message(), HasSubstr("conv1d.bias")) << st;
  const std::string wide = EditedCopy(kTiny, "mamba2_wide", "\"state_size\": 16", "\"state_size\": 8");
  const absl::Status st2 = Model::Load(wide).status();
  EXPECT_EQ(st2.code(), absl::StatusCode::kInvalidArgument) << st2;
  EXPECT_THAT(st2.message(), HasSubstr("in_proj.weight")) << st2;
}

}  // namespace
}  // namespace flatstate::testing
