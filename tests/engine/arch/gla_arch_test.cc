// fla's GLA (engine/arch/gla_arch.h) on tests/data/hf_gla_tiny (tools/hf_gla.py: 2 layers, 2
// heads sharing 1 kv head (expanded at load), dk 16, dv 32, short convolutions of 4 taps, output
// gate with the fused swish norm, SwiGLU 256 from hidden_ratio 4, untied head, BF16), against the
// float64 PyTorch reference (tools/flatstate_ref/gla.py: logits at 8 positions of an 80-token
// prompt across the first 64-token chunk boundary, 64 greedy tokens). llama.cpp has no GLA, so
// there is no second implementation's tokens here. Then what the server relies on: prefill and
// token-by-token agree, checkpoints restore exactly and stay the same size, batches do not change
// a session's tokens; configs and tensors that change the math are refused by name. The hybrid
// tests/data/hf_gla_hybrid_tiny (fla's attn layers) against the same reference.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/arch/arch_test_util.h"

namespace flatstate::testing {
namespace {

using ::testing::HasSubstr;

const std::string kTiny = std::string(FLATSTATE_SOURCE_DIR) + "/tests/data/hf_gla_tiny";
// The other options: no output gate (plain per-head norm, fla's g_norm), a decay clamp, no kv
// groups, no short convolutions, a tied head (tools/hf_gla.py; README.md there).
const std::string kNoGate = std::string(FLATSTATE_SOURCE_DIR) + "/tests/data/hf_gla_nogate_tiny";
// fla's hybrid: layer 0 of 3 is fla's softmax Attention (2 heads on 1 K/V head, RoPE theta 500),
// layers 1 and 2 GLA as kTiny's (engine/arch/fla_common.h ReadFlaAttn).
const std::string kHybrid = std::string(FLATSTATE_SOURCE_DIR) + "/tests/data/hf_gla_hybrid_tiny";

TEST(GlaArch, ReadsTheConfigAsFlaWritesIt) {
  auto m = Model::Load(kTiny);
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = (*m)->config();
  EXPECT_EQ(c.architecture, "gla");
  EXPECT_EQ(c.gla.heads, 2);
  EXPECT_EQ(c.gla.key_dim, 16);
  EXPECT_EQ(c.gla.value_dim, 32);
  EXPECT_EQ(c.gla.conv_kernel, 4);
  EXPECT_EQ(c.gla.gate_rank, 16);
  EXPECT_TRUE(c.gla.output_gate);
  EXPECT_TRUE(c.gla.fused_gate_norm);
  EXPECT_EQ(c.intermediate_size, 256);  // int(64 * 4 * 2 / 3) = 170, rounded up to 256
  EXPECT_EQ(c.mlp_kind, MlpKind::kSwiGlu);
  for (int l = 0; l < 2; ++l) EXPECT_TRUE(c.layer_attention(l).gla) << l;
  EXPECT_TRUE(c.is_linear());
  // Per session: 2 x (S 2 x 16 x 32 + window 3 x (2 x 32 + 64)) floats, whatever the context.
  EXPECT_EQ(c.state_floats(), 2u * (2 * 16 * 32 + 3 * 128));
  EXPECT_TRUE((*m)->ignored_config_keys().empty());
}

// The reference's logits within 1e-3 of its logit range and its 64 greedy tokens; f32 and bf16.
TEST(GlaArch, MatchesTheReference) { ExpectMatchesGolden(kTiny, 64, {}, /*llamacpp=*/false); }

TEST(GlaArch, WithoutTheOutputGateWithAClampMatchesTheReference) {
  auto m = Model::Load(kNoGate);
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = (*m)->config();
  EXPECT_FALSE(c.gla.output_gate);
  EXPECT_FALSE(c.gla.fused_gate_norm);
  EXPECT_EQ(c.gla.conv_kernel, 0);
  EXPECT_FLOAT_EQ(c.gla.clamp_min, -0.05f);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.state_floats(), 2u * 2 * 16 * 16);  // S only: no conv window
  ExpectMatchesGolden(kNoGate, 64, {}, /*llamacpp=*/false);
  ExpectFormsCheckpointsAndBatchInvariance(kNoGate, 64, /*flat_state=*/true);
}

// Token by token = prefill, checkpoints, a flat checkpoint size, batch invariance.
TEST(GlaArch, FormsCheckpointsFlatStateAndBatchInvariance) {
  ExpectFormsCheckpointsAndBatchInvariance(kTiny, 64, /*flat_state=*/true);
}

TEST(GlaArch, HybridReadsItsAttnLayerAndMatchesTheReference) {
  auto m = Model::Load(kHybrid);
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = (*m)->config();
  EXPECT_TRUE(c.layer_attention(0).softmax);
  EXPECT_TRUE(c.layer_attention(1).gla);
  EXPECT_TRUE(c.layer_attention(2).gla);
  EXPECT_EQ(c.num_attention_heads, 2);
  EXPECT_EQ(c.kv_heads(), 1);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.rope_theta, 500.f);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.gla.kv_groups, 2);  // the GLA layers keep their own kv groups
  EXPECT_EQ(c.kv_layers(), 1);
  EXPECT_TRUE((*m)->ignored_config_keys().empty());
  ExpectMatchesGolden(kHybrid, 64, {}, /*llamacpp=*/false);
  ExpectFormsCheckpointsAndBatchInvariance(kHybrid, 64, /*flat_state=*/false);
}

TEST(GlaArch, ConfigsThatChangeTheMathAreRefusedByKey) {
  struct Case {
    const char* from;
    const char* to;
    const char* key;
  };
  const Case cases[] = {
      {"\"feature_map\": null", "\"feature_map\": \"relu\"", "'feature_map'"},
      {"\"attn\": null", "\"attn\": {\"layers\": [1], \"num_heads\": 2, \"window_size\": 4}",
       "'attn.window_size'"},
      {"\"attnres_block_size\": null", "\"attnres_block_size\": 2", "'attnres_block_size'"},
      {"\"hidden_act\": \"swish\"", "\"hidden_act\": \"gelu\"", "'hidden_act'"},
      {"\"num_kv_heads\": 1", "\"num_kv_heads\": 3", "'num_kv_heads'"},
      {"\"expand_k\": 0.5", "\"expand_k\": 0.3", "'expand_k'"},
      {"\"elementwise_affine\": true", "\"elementwise_affine\": false", "'elementwise_affine'"},
      {"\"clamp_min\": null", "\"clamp_min\": 0.5", "'clamp_min'"},
  };
  for (const Case& k : cases) {
    const std::string dir = EditedCopy(kTiny, "gla_bad", k.from, k.to);
    const absl::Status st = Model::Load(dir).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << k.to << ": " << st;
    EXPECT_THAT(st.message(), HasSubstr(k.key)) << st;
  }
}

// A config that disagrees with the tensors names the tensor: without short convolutions the conv
// weights are unexpected; unfused, fla names the norm g_norm.
TEST(GlaArch, TensorsThatDisagreeWithTheConfigAreNamed) {
  struct Case {
    const char* from;
    const char* to;
    const char* tensor;
  };
  const Case cases[] = {
      {"\"use_short_conv\": true", "\"use_short_conv\": false", "_conv1d.weight"},
      {"\"fuse_norm\": true", "\"fuse_norm\": false", "attn.g_norm.weight"},
      {"\"use_output_gate\": true", "\"use_output_gate\": false", "attn.g_norm.weight"},
      {"\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true", "lm_head.weight"},
  };
  for (const Case& k : cases) {
    const std::string dir = EditedCopy(kTiny, "gla_tensors", k.from, k.to);
    const absl::Status st = Model::Load(dir).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << k.to << ": " << st;
    EXPECT_THAT(st.message(), HasSubstr(k.tensor)) << st;
  }
}

}  // namespace
}  // namespace flatstate::testing
