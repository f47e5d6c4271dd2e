// fla's Gated DeltaNet (engine/arch/gated_deltanet_arch.h) on tests/data/hf_gated_deltanet_tiny
// (tools/hf_gated_deltanet.py: 2 layers, 2 key heads and 4 value heads (grouped value heads),
// dk 16, dv 32, short convolutions of 4 taps fused at load, output gate, SwiGLU 128, untied head,
// BF16), against the float64 PyTorch reference (tools/flatstate_ref/gated_deltanet.py: logits at
// 8 positions of an 80-token prompt across the first 64-token chunk boundary, 64 greedy tokens).
// llama.cpp has no fla Gated DeltaNet model, so there is no second implementation's tokens. Then
// token-by-token = prefill, checkpoints, flat state, batch invariance; refusals by key / tensor.
// The hybrid: tests/data/hf_gated_deltanet_hybrid_tiny (3 layers, layer 1 fla's softmax Attention
// from config attn: 4 heads, 2 K/V heads, q/k/v biases, RoPE; engine/arch/fla_common.h) against
// the same reference with fla's attention (tools/flatstate_ref/fla_attn.py).
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/arch/arch_test_util.h"

namespace flatstate::testing {
namespace {

using ::testing::HasSubstr;

const std::string kTiny = std::string(FLATSTATE_SOURCE_DIR) + "/tests/data/hf_gated_deltanet_tiny";
const std::string kHybrid =
    std::string(FLATSTATE_SOURCE_DIR) + "/tests/data/hf_gated_deltanet_hybrid_tiny";

TEST(GatedDeltaNetArch, ReadsTheConfigAsFlaWritesIt) {
  auto m = Model::Load(kTiny);
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = (*m)->config();
  EXPECT_EQ(c.architecture, "gated_deltanet");
  EXPECT_EQ(c.delta.key_heads, 2);
  EXPECT_EQ(c.delta.value_heads, 4);
  EXPECT_EQ(c.delta.key_dim, 16);
  EXPECT_EQ(c.delta.value_dim, 32);
  EXPECT_EQ(c.delta.conv_kernel, 4);
  EXPECT_EQ(c.intermediate_size, 128);
  EXPECT_FALSE(c.norm_unit_offset);
  for (int l = 0; l < 2; ++l) EXPECT_TRUE(c.layer_attention(l).delta) << l;
  EXPECT_TRUE(c.is_linear());
  // Per session: 2 x (S 4 x 16 x 32 + window 3 x (2 x 32 + 128)) floats, whatever the context.
  EXPECT_EQ(c.state_floats(), 2u * (4 * 16 * 32 + 3 * 192));
  EXPECT_TRUE((*m)->ignored_config_keys().empty());
}

TEST(GatedDeltaNetArch, MatchesTheReference) {
  ExpectMatchesGolden(kTiny, 64, {}, /*llamacpp=*/false);
}

// The shipped models/shakespeare-gated-deltanet (tools/train_gated_deltanet.py: trained on tiny
// Shakespeare, float32, byte tokenizer.json) against the float64 reference on its golden text
// prompt (golden_reference.json in the folder): its tokenizer maps the prompt's bytes to the same
// ids; f32 logits within 1e-3 of the range at 8 positions, 64 greedy bytes equal (f32 only: the
// file is float32, so bf16 layers would round its weights).
TEST(GatedDeltaNetArch, ShippedShakespeareModelMatchesTheReference) {
  const std::string dir = std::string(FLATSTATE_SOURCE_DIR) + "/models/shakespeare-gated-deltanet";
  const auto prompt =
      ReadJson(dir + "/golden_reference.json")["prompt"].get<std::vector<int32_t>>();
  auto m = Model::Load(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  absl::StatusOr<std::vector<int32_t>> ids =
      (*m)->tokenizer().Encode(std::string(prompt.begin(), prompt.end()), false);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, prompt);
  ExpectMatchesGolden(dir, 64, {}, /*llamacpp=*/false, {WeightDtype::kF32});
}

TEST(GatedDeltaNetArch, FormsCheckpointsFlatStateAndBatchInvariance) {
  ExpectFormsCheckpointsAndBatchInvariance(kTiny, 64, /*flat_state=*/true);
}

TEST(GatedDeltaNetArch, ReadsTheHybridsAttnLayers) {
  auto m = Model::Load(kHybrid);
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = (*m)->config();
  EXPECT_TRUE(c.layer_attention(0).delta);
  EXPECT_TRUE(c.layer_attention(1).softmax);
  EXPECT_TRUE(c.layer_attention(2).delta);
  EXPECT_EQ(c.kv_layers(), 1);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.kv_heads(), 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rotary(), 16);
  EXPECT_EQ(c.rope_theta, 10000.f);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.is_linear());
  // 2 Gated DeltaNet layers of state; K and V rows of 2 x 16 per token in the one softmax layer.
  EXPECT_EQ(c.state_floats(), 2u * (4 * 16 * 32 + 3 * 192));
  EXPECT_EQ(c.kv_bytes_per_token(), 2u * 1 * 32 * 4);
  EXPECT_TRUE((*m)->ignored_config_keys().empty());
}

TEST(GatedDeltaNetArch, HybridMatchesTheReference) {
  ExpectMatchesGolden(kHybrid, 64, {}, /*llamacpp=*/false);
}

TEST(GatedDeltaNetArch, HybridFormsCheckpointsAndBatchInvariance) {
  ExpectFormsCheckpointsAndBatchInvariance(kHybrid, 64, /*flat_state=*/false);
}

TEST(GatedDeltaNetArch, ConfigsThatChangeTheMathAreRefusedByKey) {
  struct Case {
    const char* from;
    const char* to;
    const char* key;
  };
  const Case cases[] = {
      {"\"use_gate\": true", "\"use_gate\": false", "'use_gate'"},
      {"\"use_short_conv\": true", "\"use_short_conv\": false", "'use_short_conv'"},
      {"\"allow_neg_eigval\": false", "\"allow_neg_eigval\": true", "'allow_neg_eigval'"},
      {"\"attn\": null", "\"attn\": {\"layers\": [1], \"num_heads\": 2, \"window_size\": 64}",
       "'attn.window_size'"},
      {"\"num_v_heads\": 4", "\"num_v_heads\": 3", "'num_v_heads'"},
      {"\"expand_v\": 2", "\"expand_v\": 1.03", "'expand_v'"},
      {"\"hidden_act\": \"swish\"", "\"hidden_act\": \"gelu\"", "'hidden_act'"},
  };
  for (const Case& k : cases) {
    const std::string dir = EditedCopy(kTiny, "gdn_bad", k.from, k.to);
    const absl::Status st = Model::Load(dir).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << k.to << ": " << st;
    EXPECT_THAT(st.message(), HasSubstr(k.key)) << st;
  }
  // A head size that disagrees with the tensors names the tensor.
  const std::string dir = EditedCopy(kTiny, "gdn_shape", "\"head_dim\": 16", "\"head_dim\": 8");
  const absl::Status st = Model::Load(dir).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(st.message(), HasSubstr("q_proj.weight")) << st;
}

}  // namespace
}  // namespace flatstate::testing
