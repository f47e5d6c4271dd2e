// LlamaForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM checkpoints in the Hugging Face layout
// (engine/arch/llama_arch.h), against
// golden vectors of two independent implementations on the same weights (tests/data/
// hf_llama_tiny/README.md): the float64 PyTorch reference (tools/flatstate_ref/llama.py) and
// llama.cpp (converted by its own convert_hf_to_gguf.py). Two folders: GQA (4 query / 2 K/V heads)
// with head_dim 32 != hidden / heads, BF16 in two shards, untied head; llama3 RoPE scaling with
// q/k/v/o and MLP biases and a tied head; Qwen2 (q/k/v biases, tied head) and Qwen3 (q/k norms,
// head_dim 24 != hidden / heads) in tests/data/hf_qwen{2,3}_tiny.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "engine/runtime/engine.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/runtime/engine_test_util.h"

namespace flatstate::testing {
namespace {

const std::string kTiny = std::string(FLATSTATE_SOURCE_DIR) + "/tests/data/hf_llama_tiny";
const std::string kVariant = kTiny + "/llama3_bias_tied";
const std::string kQwen2 = std::string(FLATSTATE_SOURCE_DIR) + "/tests/data/hf_qwen2_tiny";
const std::string kQwen3 = std::string(FLATSTATE_SOURCE_DIR) + "/tests/data/hf_qwen3_tiny";

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return nlohmann::json::parse(f);
}

TEST(LlamaArch, ReadsTheConfigAsPublished) {
  auto m = Model::Load(kTiny);
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = (*m)->config();
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.attention_kind, AttentionKind::kSoftmax);
  EXPECT_EQ(c.mlp_kind, MlpKind::kSwiGlu);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.q_dim(), 128);
  EXPECT_EQ(c.kv_dim(), 64);
  EXPECT_EQ(c.torch_dtype, TorchDtype::kBfloat16);  // every GEMM weight is BF16 in the files
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{2});
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.kv_bytes_per_token(), 2u * 3 * 64 * 4);
  EXPECT_TRUE((*m)->ignored_config_keys().empty());

  auto v = Model::Load(kVariant);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v.value()->config().tie_word_embeddings);
  EXPECT_TRUE(v.value()->config().attention_bias);
  EXPECT_TRUE(v.value()->config().mlp_bias);
  EXPECT_EQ(v.value()->config().rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_EQ(v.value()->weights().lm_head, v.value()->weights().embed);
}

struct Golden {
  std::vector<int32_t> prompt, positions, greedy;
  std::vector<std::vector<float>> logits;
  double range = 0;
};

Golden ReadGolden(const std::string& path) {
  const nlohmann::json j = ReadJson(path);
  Golden g;
  g.prompt = j["prompt"].get<std::vector<int32_t>>();
  g.positions = j["positions"].get<std::vector<int32_t>>();
  g.greedy = j["greedy"].get<std::vector<int32_t>>();
  g.logits = j["logits"].get<std::vector<std::vector<float>>>();
  for (const auto& row : g.logits) {
    const auto [lo, hi] = std::minmax_element(row.begin(), row.end());
    g.range = std::max(g.range, static_cast<double>(*hi - *lo));
  }
  return g;
}

// Logits at the golden positions and 64 greedy tokens, against the float64 reference and
// llama.cpp: max |difference| <= 1e-3 of the logit range (measured: docs/models.md), and the same
// 64 tokens. Runs f32 and the file's own bf16 (the same values: BF16 widens exactly).
class LlamaGolden : public ::testing::TestWithParam<std::tuple<std::string, WeightDtype>> {};

TEST_P(LlamaGolden, MatchesTheReferenceAndLlamaCpp) {
  const auto& [dir, dtype] = GetParam();
  auto e = MakeEngine(dir, 2, 64, dtype);
  ASSERT_NE(e, nullptr);
  const int V = e->config().vocab_size;
  for (const char* peer : {"golden_reference.json", "golden_llamacpp.json"}) {
    const Golden g = ReadGolden(dir + "/" + peer);
    SessionState s = e->NewSession({});
    auto logits = e->Score(&s, g.prompt);
    ASSERT_TRUE(logits.ok()) << logits.status();
    double worst = 0;
    for (size_t i = 0; i < g.positions.size(); ++i) {
      for (int v = 0; v < V; ++v) {
        worst = std::max(worst, std::abs(double{(*logits)[g.positions[i] * V + v]} -
                                         g.logits[i][v]));
      }
    }
    EXPECT_LE(worst, 1e-3 * g.range) << peer;
    RecordProperty(std::string("max_abs_logit_diff_") + peer, std::to_string(worst));
    e->ReleaseSession(&s);
    SessionState gen = e->NewSession({});
    EXPECT_EQ(GenerateAlone(e.get(), &gen, g.prompt, 64), g.greedy) << peer;
    e->ReleaseSession(&gen);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Folders, LlamaGolden,
    ::testing::Combine(::testing::Values(kTiny, kVariant, kQwen2, kQwen3),
                       ::testing::Values(WeightDtype::kF32, WeightDtype::kBf16)),
    [](const auto& info) {
      const std::string& d = std::get<0>(info.param);
      return std::string(d == kTiny      ? "llama_gqa_bf16_shards"
                         : d == kVariant ? "llama3_bias_tied"
                         : d == kQwen2   ? "qwen2_bias_tied"
                                         : "qwen3_qk_norm") +
             "_" + std::string(WeightDtypeName(std::get<1>(info.param)));
    });

// The Qwen entries read their families' configs: Qwen2's q/k/v biases without an o_proj bias and
// its tied head; Qwen3's per-head q/k norms and its explicit head_dim.
TEST(LlamaArch, QwenFamilies) {
  auto q2 = Model::Load(kQwen2);
  ASSERT_TRUE(q2.ok()) << q2.status();
  EXPECT_EQ(q2.value()->config().architecture, "qwen2");
  EXPECT_NE(q2.value()->weights().layers[0].bqkv, nullptr);
  EXPECT_EQ(q2.value()->weights().layers[0].bo, nullptr);
  EXPECT_EQ(q2.value()->weights().lm_head, q2.value()->weights().embed);
  auto q3 = Model::Load(kQwen3);
  ASSERT_TRUE(q3.ok()) << q3.status();
  EXPECT_EQ(q3.value()->config().architecture, "qwen3");
  EXPECT_TRUE(q3.value()->config().qk_norm);
  EXPECT_EQ(q3.value()->config().head_dim, 24);
  EXPECT_EQ(q3.value()->config().q_dim(), 144);
  EXPECT_NE(q3.value()->weights().layers[2].k_norm, nullptr);
  EXPECT_TRUE(q3.value()->ignored_config_keys().empty());
}

// A BF16 checkpoint run as f32 and as its own bf16 gives the same bits on the CPU, and a
// checkpoint of a Llama session (GQA K/V rows) restores and continues token for token.
TEST(LlamaArch, Bf16IsF32AndCheckpointsContinueExactly) {
  auto f32 = MakeEngine(kTiny, 2, 64, WeightDtype::kF32);
  auto bf16 = MakeEngine(kTiny, 2, 64, WeightDtype::kBf16);
  ASSERT_NE(f32, nullptr);
  ASSERT_NE(bf16, nullptr);
  const Golden g = ReadGolden(kTiny + "/golden_reference.json");
  SessionState a = f32->NewSession({}), b = bf16->NewSession({});
  auto la = f32->Score(&a, g.prompt), lb = bf16->Score(&b, g.prompt);
  ASSERT_TRUE(la.ok() && lb.ok());
  EXPECT_EQ(*la, *lb);

  SessionState s = f32->NewSession({.temperature = 0.8f, .top_k = 0, .top_p = 0.95f, .seed = 5});
  const std::vector<int32_t> first = GenerateAlone(f32.get(), &s, g.prompt, 10);
  auto blob = f32->Checkpoint(s);
  ASSERT_TRUE(blob.ok()) << blob.status();
  const std::vector<int32_t> rest = GenerateAlone(f32.get(), &s, {}, 20);
  auto restored = f32->Restore(*blob);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(GenerateAlone(f32.get(), &*restored, {}, 20), rest);
  EXPECT_EQ(first.size(), 10u);
}

// A session's tokens do not depend on who shares its step (bitwise batch invariance on the CPU).
TEST(LlamaArch, OutputsDoNotDependOnTheBatch) {
  auto e = MakeEngine(kTiny, 2, 256, WeightDtype::kF32);
  ASSERT_NE(e, nullptr);
  const Golden g = ReadGolden(kTiny + "/golden_reference.json");
  SessionState alone = e->NewSession({.temperature = 1.f, .top_k = 0, .top_p = 1.f, .seed = 3});
  const std::vector<int32_t> want = GenerateAlone(e.get(), &alone, g.prompt, 24);
  SessionState crowd = e->NewSession({.temperature = 1.f, .top_k = 0, .top_p = 1.f, .seed = 3});
  ASSERT_TRUE(e->Append(&crowd, g.prompt).ok());
  EXPECT_EQ(GenerateInCrowd(e.get(), &crowd, 24, 3), want);
}

}  // namespace
}  // namespace flatstate::testing
