// Qwen3.5's text model (engine/arch/qwen35_arch.h): Gated DeltaNet layers and gated softmax
// layers, on tests/data/hf_qwen35_tiny (tools/hf_qwen35.py: 3 Gated DeltaNet layers then one
// full-attention layer, 2 key / 4 value heads, partial rotary, tied head, BF16), against the
// float64 PyTorch reference (tools/flatstate_ref/qwen35.py; its logits at 8 positions across the
// first chunk boundary, 64 greedy tokens) and llama.cpp's greedy tokens on the same folder
// (converted by its own convert_hf_to_gguf.py; README.md there).
#include <string>

#include "gtest/gtest.h"
#include "tests/engine/arch/arch_test_util.h"

namespace flatstate::testing {
namespace {

const std::string kTiny = std::string(FLATSTATE_SOURCE_DIR) + "/tests/data/hf_qwen35_tiny";

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
TEST(Qwen35Arch, MatchesTheReferenceAndLlamaCpp) { ExpectMatchesGolden(kTiny, 64); }

// Token by token (the recurrent form) and one prefill (the chunked form) give the same greedy
// continuation; a checkpoint taken mid-generation restores and continues exactly; a session's
// sampled tokens do not depend on the batch.
TEST(Qwen35Arch, FormsCheckpointsAndBatchInvariance) {
  ExpectFormsCheckpointsAndBatchInvariance(kTiny, 256, /*flat_state=*/false);
}

}  // namespace
}  // namespace flatstate::testing
