// RWKV-7 (engine/arch/rwkv7_arch.h) on tests/data/hf_rwkv7_tiny (tools/hf_rwkv7.py: fla-hub
// layout, 2 layers, 2 heads of 32, LoRA ranks 16/16/8/16, FFN 128, untied head, BF16, a
// synthetic World vocabulary), against the float64 PyTorch reference (tools/flatstate_ref/
// rwkv7.py: logits at 8 positions of an 80-token prompt, 64 greedy tokens) and llama.cpp's greedy
// tokens on the same folder (its own convert_hf_to_gguf.py; README.md there). Then what the
// server relies on: prefill and token-by-token agree, checkpoints restore exactly and stay the
// same size, batches do not change a session's tokens; the World vocabulary is the model's
// tokenizer; bad configs are refused by key.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "engine/chat/chat_prompt.h"
#include "engine/runtime/engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/runtime/engine_test_util.h"

namespace flatstate::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kTiny = std::string(FLATSTATE_SOURCE_DIR) + "/tests/data/hf_rwkv7_tiny";

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return nlohmann::json::parse(f);
}

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

// Logits at the golden positions within 1e-3 of the logit range of the float64 reference, its 64
// greedy tokens and llama.cpp's; f32 and the file's own bf16.
TEST(Rwkv7Arch, MatchesTheReferenceAndLlamaCpp) {
  const nlohmann::json g = ReadJson(kTiny + "/golden_reference.json");
  const auto prompt = g["prompt"].get<std::vector<int32_t>>();
  const auto positions = g["positions"].get<std::vector<int32_t>>();
  const auto want = g["logits"].get<std::vector<std::vector<float>>>();
  const double range = g["logit_max"].get<double>() - g["logit_min"].get<double>();
  for (WeightDtype dtype : {WeightDtype::kF32, WeightDtype::kBf16}) {
    auto e = MakeEngine(kTiny, 2, 64, dtype);
    ASSERT_NE(e, nullptr);
    const int V = e->config().vocab_size;
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

TEST(Rwkv7Arch, FormsCheckpointsFlatStateAndBatchInvariance) {
  auto e = MakeEngine(kTiny, 2, 64, WeightDtype::kF32);
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

std::string EditedTiny(const std::string& name, const std::string& from, const std::string& to) {
  const std::string dir = TempDir() + "/rwkv7_" + name;
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
    const std::string dir = EditedTiny("bad", k.from, k.to);
    const absl::Status st = Model::Load(dir).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << k.to << ": " << st;
    EXPECT_THAT(st.message(), HasSubstr(k.key)) << st;
  }
  // A LoRA rank that disagrees with the tensors names the tensor.
  const std::string rank = EditedTiny("rank", "\"v_low_rank_dim\": 8", "\"v_low_rank_dim\": 16");
  const absl::Status st = Model::Load(rank).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(st.message(), HasSubstr("v_lora.lora.0.weight")) << st;
}

}  // namespace
}  // namespace flatstate::testing
