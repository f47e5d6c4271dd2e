// fla's DeltaNet (engine/arch/delta_net_arch.h) on two golden folders written by
// tools/hf_delta_net.py, against the float64 PyTorch reference (tools/flatstate_ref/delta_net.py:
// logits at 8 positions of an 80-token prompt across the first 64-token chunk boundary, 64 greedy
// tokens): tests/data/hf_delta_net_tiny (fla-hub/delta_net-1.3B-100B's options: short convs,
// beta, silu on q and k, no output gate, untied; 4 heads, dk 16, dv 32) and
// tests/data/hf_delta_net_variant_tiny (the other options: output gate, no short convs, no beta,
// allow_neg_eigval, identity on q and k; 2 heads, dk 16, dv 32). llama.cpp has no fla
// DeltaNet model. Then token-by-token = prefill, checkpoints, flat state, batch invariance;
// refusals by key and tensor, fla's hybrid attn specs included.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/arch/arch_test_util.h"

namespace flatstate::testing {
namespace {

using ::testing::HasSubstr;

const std::string kTiny = std::string(FLATSTATE_SOURCE_DIR) + "/tests/data/hf_delta_net_tiny";
const std::string kVariant =
    std::string(FLATSTATE_SOURCE_DIR) + "/tests/data/hf_delta_net_variant_tiny";

TEST(DeltaNetArch, ReadsTheConfigAsFlaWritesIt) {
  auto m = Model::Load(kTiny);
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = (*m)->config();
  EXPECT_EQ(c.architecture, "delta_net");
  EXPECT_EQ(c.delta.key_heads, 4);
  EXPECT_EQ(c.delta.value_heads, 4);
  EXPECT_EQ(c.delta.key_dim, 16);
  EXPECT_EQ(c.delta.value_dim, 32);
  EXPECT_EQ(c.delta.conv_kernel, 4);
  EXPECT_FALSE(c.delta.decay);
  EXPECT_FALSE(c.delta.output_gate);
  EXPECT_TRUE(c.delta.use_beta);
  EXPECT_TRUE(c.delta.qk_silu);
  EXPECT_EQ(c.delta.beta_scale, 1.f);
  EXPECT_EQ(c.intermediate_size, 128);
  for (int l = 0; l < 2; ++l) EXPECT_TRUE(c.layer_attention(l).delta) << l;
  EXPECT_TRUE(c.is_linear());
  // Per session: 2 x (S 4 x 16 x 32 + window 3 x (2 x 64 + 128)) floats, whatever the context.
  EXPECT_EQ(c.state_floats(), 2u * (4 * 16 * 32 + 3 * 256));
  EXPECT_TRUE((*m)->ignored_config_keys().empty());

  auto v = Model::Load(kVariant);
  ASSERT_TRUE(v.ok()) << v.status();
  const ModelConfig& cv = (*v)->config();
  EXPECT_EQ(cv.delta.key_heads, 2);
  EXPECT_EQ(cv.delta.key_dim, 16);
  EXPECT_EQ(cv.delta.value_dim, 32);
  EXPECT_EQ(cv.delta.conv_kernel, 0);
  EXPECT_TRUE(cv.delta.output_gate);
  EXPECT_FALSE(cv.delta.use_beta);
  EXPECT_FALSE(cv.delta.qk_silu);
  EXPECT_EQ(cv.delta.beta_scale, 2.f);
  EXPECT_FALSE(cv.tie_word_embeddings);
  EXPECT_EQ(cv.state_floats(), 2u * (2 * 16 * 32));  // S only: no conv window
  EXPECT_TRUE((*v)->ignored_config_keys().empty());
}

TEST(DeltaNetArch, MatchesTheReference) { ExpectMatchesGolden(kTiny, 64, {}, /*llamacpp=*/false); }

TEST(DeltaNetArch, VariantMatchesTheReference) {
  ExpectMatchesGolden(kVariant, 64, {}, /*llamacpp=*/false);
}

TEST(DeltaNetArch, FormsCheckpointsFlatStateAndBatchInvariance) {
  ExpectFormsCheckpointsAndBatchInvariance(kTiny, 64, /*flat_state=*/true);
  ExpectFormsCheckpointsAndBatchInvariance(kVariant, 64, /*flat_state=*/true);
}

TEST(DeltaNetArch, ConfigsThatChangeTheMathAreRefusedByKey) {
  struct Case {
    const char* from;
    const char* to;
    const char* key;
  };
  const Case cases[] = {
      {"\"qk_activation\": \"silu\"", "\"qk_activation\": \"relu\"", "'qk_activation'"},
      {"\"qk_activation\": \"silu\"", "\"qk_activation\": \"elu\"", "'qk_activation'"},
      {"\"qk_norm\": \"l2\"", "\"qk_norm\": \"sum\"", "'qk_norm'"},
      {"\"expand_k\": 1", "\"expand_k\": 0.3", "'expand_k'"},
      {"\"num_heads\": 4", "\"num_heads\": 5", "'expand_k'"},
      {"\"hidden_act\": \"swish\"", "\"hidden_act\": \"gelu\"", "'hidden_act'"},
      {"\"attnres_block_size\": null", "\"attnres_block_size\": 2", "'attnres_block_size'"},
      // fla's hybrid attn specs (fla_common.h ReadFlaAttn)
      {"\"attn\": null", "\"attn\": {\"layers\": [1], \"num_heads\": 4, \"window_size\": 8}",
       "'attn.window_size'"},
      {"\"attn\": null", "\"attn\": {\"layers\": [2], \"num_heads\": 4}", "'attn.layers'"},
      {"\"attn\": null", "\"attn\": {\"layers\": [1]}", "'attn.num_heads'"},
      {"\"attn\": null", "\"attn\": {\"layers\": [1], \"num_heads\": 3}", "'attn.num_heads'"},
      {"\"attn\": null", "\"attn\": {\"layers\": [1], \"num_heads\": 4, \"num_kv_heads\": 3}",
       "'attn.num_kv_heads'"},
      {"\"attn\": null", "\"attn\": {\"layers\": [1], \"num_heads\": 4, \"rope_theta\": -1}",
       "'attn.rope_theta'"},
      {"\"attn\": null", "\"attn\": {\"layers\": [1], \"num_heads\": 4, \"rope_theta\": 1e-300}",
       "'attn.rope_theta'"},
      {"\"attn\": null",
       "\"attn\": [{\"layers\": [0], \"num_heads\": 4}, {\"layers\": [0], \"num_heads\": 4}]",
       "'attn[1].layers'"},
      {"\"attn\": null",
       "\"attn\": [{\"layers\": [0], \"num_heads\": 4}, {\"layers\": [1], \"num_heads\": 2}]",
       "'attn[1]'"},
      {"\"attn\": null", "\"attn\": 3", "'attn'"},
  };
  for (const Case& k : cases) {
    const std::string dir = EditedCopy(kTiny, "dn_bad", k.from, k.to);
    const absl::Status st = Model::Load(dir).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << k.to << ": " << st;
    EXPECT_THAT(st.message(), HasSubstr(k.key)) << st;
  }
  // An attn layer names the tensors it is missing: layer 1 of the folder holds DeltaNet's.
  const std::string dir = EditedCopy(kTiny, "dn_attn", "\"attn\": null",
                                     "\"attn\": {\"layers\": [1], \"num_heads\": 4}");
  absl::Status st = Model::Load(dir).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(st.message(), HasSubstr("model.layers.1.attn.")) << st;
  // A switch that disagrees with the tensors names the tensor.
  const std::string gate =
      EditedCopy(kTiny, "dn_gate", "\"use_gate\": false", "\"use_gate\": true");
  st = Model::Load(gate).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(st.message(), HasSubstr("g_proj.weight")) << st;
}

}  // namespace
}  // namespace flatstate::testing
