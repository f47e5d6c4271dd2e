// Models whose layers mix token mixers (config "layer_types": softmax layers between recurrent
// ones, as Jamba, Qwen3-Next and Qwen3.5 do): a session holds KV blocks for the softmax layers and
// fixed-size state for the others, and everything a model of one kind has works for it too —
// exact forms, batch invariance, checkpoints (state then K/V rows), the split checkpoint, the
// prefix cache. The all-softmax and all-recurrent layer_types give, bit for bit, the softmax kind
// and the recurrent kind on the same tensors.
#include <filesystem>
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

ModelConfig Mixed(AttentionKind kind) {
  ModelConfig c = SmallConfig(kind);
  c.num_hidden_layers = 4;
  c.softmax_layer = {false, true, false, true};
  return c;
}

std::string WriteModel(const std::string& name, const ModelConfig& c, uint64_t seed = 5) {
  const std::string dir = TempDir() + "/" + name;
  auto st = WriteRandomModel(dir, c, seed);
  EXPECT_TRUE(st.ok()) << st.status();
  return dir;
}

// A copy of `dir` whose config.json is edited by `edit`: the same tensors, another config.
std::string WithConfig(const std::string& dir, const std::string& name,
                       const std::function<void(nlohmann::json&)>& edit) {
  const std::string out = TempDir() + "/" + name;
  fs::create_directories(out);
  fs::copy_file(dir + "/model.safetensors", out + "/model.safetensors");
  nlohmann::json j = nlohmann::json::parse(ReadFile(dir + "/config.json"));
  edit(j);
  EXPECT_TRUE(WriteFile(out + "/config.json", j.dump(2)));
  return out;
}

std::vector<float> Logits(Engine* e, const std::vector<int32_t>& tokens) {
  SessionState s = e->NewSession({});
  auto l = e->Score(&s, tokens);
  EXPECT_TRUE(l.ok()) << l.status();
  e->ReleaseSession(&s);
  return l.ok() ? *l : std::vector<float>{};
}

TEST(LayerTypes, AllSoftmaxIsTheSoftmaxKindAndAllRecurrentIsTheKind) {
  const std::vector<int32_t> tokens = Tokens(40, 3);
  const std::string soft = WriteModel("lt_soft", SmallConfig(AttentionKind::kSoftmax));
  const std::string as_layers = WithConfig(soft, "lt_soft_layers", [](auto& j) {
    j["attention_kind"] = "linear_elu";
    j["layer_types"] = {"softmax", "softmax"};
  });
  auto a = MakeEngine(soft), b = MakeEngine(as_layers);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->config().state_floats(), 0u);
  EXPECT_EQ(Logits(b.get(), tokens), Logits(a.get(), tokens));

  for (AttentionKind k : {AttentionKind::kLinearElu, AttentionKind::kCosine, AttentionKind::kFavor,
                          AttentionKind::kCosformer}) {
    const std::string lin = WriteModel(std::string("lt_") + std::string(AttentionKindName(k)),
                                       SmallConfig(k));
    const std::string rec = WithConfig(lin, std::string("lt_rec_") +
                                                std::string(AttentionKindName(k)),
                                       [](auto& j) { j["layer_types"] = {"recurrent", "recurrent"}; });
    auto c = MakeEngine(lin), d = MakeEngine(rec);
    ASSERT_NE(c, nullptr);
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(Logits(d.get(), tokens), Logits(c.get(), tokens)) << AttentionKindName(k);
  }
}

TEST(LayerTypes, SessionsHoldStateForRecurrentLayersAndKvForSoftmaxLayers) {
  const ModelConfig mixed = Mixed(AttentionKind::kLinearElu);
  ModelConfig all = mixed;
  all.softmax_layer.clear();
  EXPECT_EQ(mixed.kv_layers(), 2);
  EXPECT_EQ(mixed.kv_layer_index(3), 1);
  EXPECT_EQ(mixed.state_floats() * 2, all.state_floats());  // half the layers keep state
  EXPECT_EQ(mixed.kv_bytes_per_token(), 2u * 2 * 64 * 4);
  auto e = MakeEngine(WriteModel("lt_mixed_bytes", mixed));
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->kv_bytes_per_token(), 2u * 2 * 64 * 4);
  SessionState s = e->NewSession({});
  ASSERT_TRUE(e->Score(&s, Tokens(33, 1)).ok());
  EXPECT_EQ(s.linear.size(), mixed.state_floats());
  EXPECT_EQ(e->SessionBytes(s), mixed.state_bytes() + 3 * e->kv_pool()->bytes_per_block());
  e->ReleaseSession(&s);
}

class LayerTypesKinds : public ::testing::TestWithParam<AttentionKind> {};

// The chunked prefill equals token-by-token decoding (the recurrent layers' forms agree to 1e-5;
// softmax layers are exact), and a session's tokens do not depend on the step budget or on who
// shares its steps.
TEST_P(LayerTypesKinds, FormsBudgetsAndBatchesAgree) {
  auto e = MakeEngine(WriteModel(std::string("lt_forms_") + std::string(AttentionKindName(GetParam())),
                                 Mixed(GetParam())),
                      2, 512);
  ASSERT_NE(e, nullptr);
  const std::vector<int32_t> prompt = Tokens(45, 9);
  const std::vector<float> whole = Logits(e.get(), prompt);
  SessionState s = e->NewSession({});
  const int V = e->config().vocab_size;
  for (size_t t = 0; t < prompt.size(); ++t) {
    auto l = e->Score(&s, std::vector<int32_t>{prompt[t]});
    ASSERT_TRUE(l.ok()) << l.status();
    for (int v = 0; v < V; ++v) ASSERT_NEAR((*l)[v], whole[t * V + v], 1e-4) << t << " " << v;
  }
  e->ReleaseSession(&s);

  const SamplingParams sp{0.9f, 0, 1.f, 11};
  SessionState a = e->NewSession(sp), b = e->NewSession(sp), c = e->NewSession(sp);
  const std::vector<int32_t> alone = GenerateAlone(e.get(), &a, prompt, 20);
  EXPECT_EQ(GenerateAlone(e.get(), &b, prompt, 20, /*budget=*/7), alone);
  ASSERT_TRUE(e->Append(&c, prompt).ok());
  EXPECT_EQ(GenerateInCrowd(e.get(), &c, 20, 3), alone);
  for (SessionState* x : {&a, &b, &c}) e->ReleaseSession(x);
}

// A checkpoint holds the state and the K/V rows; it restores (into a pool of another block size
// too) and continues token for token; the split form joins to the same bytes.
TEST_P(LayerTypesKinds, CheckpointsCarryStateAndKv) {
  const std::string dir = WriteModel(
      std::string("lt_ckpt_") + std::string(AttentionKindName(GetParam())), Mixed(GetParam()));
  auto e = MakeEngine(dir, 2, 256);
  EngineOptions o;
  o.threads = 2;
  o.kv_blocks = 256;
  o.kv_block_size = 8;
  auto other = MakeEngineWith(dir, o);
  ASSERT_NE(e, nullptr);
  ASSERT_NE(other, nullptr);
  SessionState s = e->NewSession({0.8f, 0, 1.f, 4});
  GenerateAlone(e.get(), &s, Tokens(37, 2), 6);
  auto blob = e->Checkpoint(s);
  ASSERT_TRUE(blob.ok()) << blob.status();
  auto split = e->CheckpointSplitFrom(s, 0);
  ASSERT_TRUE(split.ok()) << split.status();
  auto joined = JoinCheckpoint(split->head, split->chunk_tokens, split->chunks);
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(*joined, *blob);
  const std::vector<int32_t> rest = GenerateAlone(e.get(), &s, {}, 12);
  auto r1 = e->Restore(*blob);
  auto r2 = other->Restore(*blob);
  ASSERT_TRUE(r1.ok()) << r1.status();
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_EQ(GenerateAlone(e.get(), &*r1, {}, 12), rest);
  EXPECT_EQ(GenerateAlone(other.get(), &*r2, {}, 12), rest);
  e->ReleaseSession(&s);
  e->ReleaseSession(&*r1);
  other->ReleaseSession(&*r2);
}

// The prefix cache restores both the state and the K/V blocks of a shared prompt prefix, and the
// tokens are the same bits as without the cache.
TEST_P(LayerTypesKinds, PrefixCacheRestoresStateAndBlocks) {
  const std::string dir = WriteModel(
      std::string("lt_cache_") + std::string(AttentionKindName(GetParam())), Mixed(GetParam()));
  EngineOptions o;
  o.threads = 2;
  o.kv_blocks = 256;
  o.prefix_cache_bytes = size_t{8} << 20;
  auto cached = MakeEngineWith(dir, o);
  auto plain = MakeEngine(dir, 2, 256);
  ASSERT_NE(cached, nullptr);
  ASSERT_NE(plain, nullptr);
  std::vector<int32_t> prompt = Tokens(70, 6);
  const SamplingParams sp{0.7f, 0, 1.f, 2};
  SessionState want = plain->NewSession(sp);
  const std::vector<int32_t> expected = GenerateAlone(plain.get(), &want, prompt, 10);
  for (int turn = 0; turn < 2; ++turn) {
    SessionState s = cached->NewSession(sp);
    auto hit = cached->AppendPrompt(&s, prompt);
    ASSERT_TRUE(hit.ok()) << hit.status();
    EXPECT_EQ(*hit, turn == 0 ? 0 : 64) << "turn " << turn;
    EXPECT_EQ(GenerateAlone(cached.get(), &s, {}, 10), expected) << "turn " << turn;
    cached->ReleaseSession(&s);
  }
  EXPECT_EQ(cached->prefix_cache_stats().hits, 1u);
  plain->ReleaseSession(&want);
}

INSTANTIATE_TEST_SUITE_P(Kinds, LayerTypesKinds,
                         ::testing::Values(AttentionKind::kLinearElu, AttentionKind::kCosine,
                                           AttentionKind::kFavor, AttentionKind::kCosformer),
                         KindName);

TEST(LayerTypes, ConfigErrorsNameTheKey) {
  const std::string base = R"({"attention_kind": "linear_elu", "vocab_size": 256, "hidden_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128, )";
  auto err = [&](const std::string& rest) {
    return ParseModelConfig(base + rest + "}", "m/config.json").status();
  };
  EXPECT_THAT(err(R"("layer_types": ["softmax"])").message(),
              ::testing::HasSubstr("'layer_types' must be a list of num_hidden_layers = 2"));
  EXPECT_THAT(err(R"("layer_types": ["softmax", "mamba"])").message(),
              ::testing::HasSubstr("'layer_types[1]' = \"mamba\""));
  auto soft = ParseModelConfig(
      R"({"attention_kind": "softmax", "vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 4, "intermediate_size": 128, "layer_types": ["softmax", "softmax"]})",
      "m/config.json");
  EXPECT_THAT(soft.status().message(), ::testing::HasSubstr("'layer_types' is for the kinds"));
  EXPECT_TRUE(ParseModelConfig(base + R"("layer_types": ["recurrent", "softmax"]})",
                               "m/config.json")
                  .ok());
}

}  // namespace
}  // namespace flatstate::testing
