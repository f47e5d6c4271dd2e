// RWKV-7 (engine/arch/rwkv7_arch.h) on tests/data/hf_rwkv7_tiny (tools/hf_rwkv7.py: fla-hub
// layout, 2 layers, 2 heads of 32, LoRA ranks 16/16/8/16, FFN 128, untied head, BF16, a
// synthetic World vocabulary), against the float64 PyTorch reference (tools/flatstate_ref/
// rwkv7.py: logits at 8 positions of an 80-token prompt, 64 greedy tokens) and llama.cpp's greedy
// tokens on the same folder (its own convert_hf_to_gguf.py; README.md there). Then what the
// server relies on: prefill and token-by-token agree, checkpoints restore exactly and stay the
// same size, batches do not change a session's tokens; the World vocabulary is the model's
// tokenizer; bad configs are refused by key.
#include <string>
#include <vector>

#include "engine/chat/chat_prompt.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/arch/arch_test_util.h"

namespace flatstate::testing {
namespace {

using ::testing::HasSubstr;

const std::string kTiny = std::string(FLATSTATE_SOURCE_DIR) + "/tests/data/hf_rwkv7_tiny";

TEST(Rwkv7Arch, ReadsTheConfigAsFlaWritesIt) {
  auto m = Model::Load(kTiny);
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = (*m)->config();
  EXPECT_EQ(c.architecture, "rwkv7");
  EXPECT_EQ(c.rwkv.heads, 2);
  EXPECT_EQ(c.rwkv.head_dim, 32);
  EXPECT_EQ(c.rwkv.decay_rank, 16);
  EXPECT_EQ(c.rwkv.v_rank, 8);
  EXPECT_FALSE(c.rwkv.fused_l2);
  EXPECT_EQ(c.intermediate_size, 128);
  EXPECT_EQ(c.norm_kind, NormKind::kLayer);
  EXPECT_EQ(c.mlp_kind, MlpKind::kReluSquaredShift);
  for (int l = 0; l < 2; ++l) EXPECT_TRUE(c.layer_attention(l).rwkv7) << l;
  EXPECT_TRUE(c.is_linear());
  // 2 layers x (2 x 32 x 32 + 2 x 64) x 4 B (tools/flatstate_ref/rwkv7.py state_bytes).
  EXPECT_EQ(c.state_bytes(), 17408u);
  EXPECT_TRUE((*m)->ignored_config_keys().empty());
  const Tokenizer& t = (*m)->tokenizer();
  EXPECT_EQ(t.kind(), "rwkv-world");
  EXPECT_EQ(t.vocab_size(), 512);
  auto ids = t.Encode("hello", false);
  ASSERT_TRUE(ids.ok()) << ids.status();
  std::string back;
  for (int32_t id : *ids) back += t.TokenBytes(id);
  EXPECT_EQ(back, "hello");
}

// The World vocabulary ships no chat template: RWKV's own format, ended by a blank line.
TEST(Rwkv7Arch, ChatUsesRwkvsFormat) {
  auto m = Model::Load(kTiny);
  ASSERT_TRUE(m.ok()) << m.status();
  const ChatPrompt* p = (*m)->chat_prompt();
  ASSERT_NE(p, nullptr) << (*m)->chat_prompt_status();
  Conversation c;
  c.messages = nlohmann::ordered_json::parse(R"([
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Hi\n\nthere "},
      {"role": "assistant", "content": "Hello."},
      {"role": "user", "content": "Again"}])");
  auto text = p->Render(c);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text,
            "System: Be brief.\n\nUser: Hi\nthere\n\nAssistant: Hello.\n\nUser: Again\n\n"
            "Assistant:");
  EXPECT_EQ(p->stop(), std::vector<std::string>{"\n\n"});
  auto ids = p->Encode(c);
  ASSERT_TRUE(ids.ok()) << ids.status();
  std::string back;
  for (int32_t id : *ids) back += (*m)->tokenizer().TokenBytes(id);
  EXPECT_EQ(back, *text);
}

// The reference's logits and greedy tokens and llama.cpp's greedy tokens; f32 and bf16.
TEST(Rwkv7Arch, MatchesTheReferenceAndLlamaCpp) { ExpectMatchesGolden(kTiny, 64); }

// Token by token = prefill, checkpoints, a flat checkpoint size, batch invariance.
TEST(Rwkv7Arch, FormsCheckpointsFlatStateAndBatchInvariance) {
  ExpectFormsCheckpointsAndBatchInvariance(kTiny, 64, /*flat_state=*/true);
}

TEST(Rwkv7Arch, ConfigsThatChangeTheMathAreRefusedByKey) {
  struct Case {
    const char* from;
    const char* to;
    const char* key;
  };
  const Case cases[] = {
      {"\"head_dim\": 32", "\"head_dim\": 24", "'head_dim'"},
      {"\"num_heads\": 2", "\"num_heads\": 4", "'num_heads'"},
      {"\"norm_bias\": true", "\"norm_bias\": false", "'norm_bias'"},
      {"\"hidden_act\": \"sqrelu\"", "\"hidden_act\": \"relu\"", "'hidden_act'"},
      {"\"attn\": null", "\"attn\": {\"layers\": [1]}", "'attn'"},
      {"\"value_dim\": [", "\"value_dim\": [128, ", "'value_dim'"},
  };
  for (const Case& k : cases) {
    const std::string dir = EditedCopy(kTiny, "rwkv7_bad", k.from, k.to);
    const absl::Status st = Model::Load(dir).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << k.to << ": " << st;
    EXPECT_THAT(st.message(), HasSubstr(k.key)) << st;
  }
  // A LoRA rank that disagrees with the tensors names the tensor.
  const std::string rank = EditedCopy(kTiny, "rwkv7_rank", "\"v_low_rank_dim\": 8", "\"v_low_rank_dim\": 16");
  const absl::Status st = Model::Load(rank).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(st.message(), HasSubstr("v_lora.lora.0.weight")) << st;
}

}  // namespace
}  // namespace flatstate::testing
