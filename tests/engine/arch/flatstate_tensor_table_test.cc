// FlatstateTensorTable (engine/arch/flatstate_arch.h) against the hand-written table it replaced,
// kept here as LegacyTable (a verbatim copy of the function before the table became data,
// engine/arch/flatstate_tensors.json): for every shipped models/*/config.json and
// tests/data/models/*/config.json, and for every kind with and without a convolution, with
// layer_types and with both hybrid layouts, the rows (name, shape, role, layer) are equal and in
// the same order. Malformed table data fails here (the process aborts in FlatstateTensorTable).
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/arch/flatstate_arch.h"
#include "engine/model/config.h"
#include "engine/util/read_file.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace flatstate {
namespace {

// The hand-written FlatstateTensorTable as it was (engine/arch/flatstate_arch.cc before the
// table became data); compare against this, do not edit it.
std::vector<FlatstateTensor> LegacyTable(const ModelConfig& c) {
  using R = FlatstateTensor::Role;
  const int64_t D = c.hidden_size, H = c.num_attention_heads, hd = c.head_dim;
  const int64_t F = c.intermediate_size, K = c.conv_kernel_size, V = c.vocab_size;
  std::vector<FlatstateTensor> t;
  t.push_back({"embed.weight", {V, D}, R::kEmbed});
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = absl::StrCat("layers.", i, ".");
    t.push_back({p + "attn_norm.weight", {D}, R::kAttnNorm, i});
    if (c.layer_has_conv(i)) t.push_back({p + "attn.conv", {D, K}, R::kConv, i});
    t.push_back({p + "attn.wqkv.weight", {3 * D, D}, R::kWqkv, i});
    t.push_back({p + "attn.wo.weight", {D, D}, R::kWo, i});
    if (c.layer_attention(i).softmax) {
      // a softmax layer (the softmax kind's, or of layer_types): no kind-specific tensors
    } else if (c.attention_kind == AttentionKind::kCosine) {
      t.push_back({p + "attn.decay_logit", {H}, R::kDecayLogit, i});
    } else if (c.attention_kind == AttentionKind::kFavor) {
      t.push_back({p + "attn.feature_proj", {c.favor_num_features, hd}, R::kFeatureProj, i});
    } else if (c.attention_kind == AttentionKind::kGated) {
      t.push_back({p + "attn.feature_proj", {c.rfa_num_features, hd}, R::kFeatureProj, i});
      t.push_back({p + "attn.feature_log_scale", {H}, R::kFeatureLogScale, i});
      t.push_back({p + "attn.gate.weight", {H, D}, R::kGateWeight, i});
      t.push_back({p + "attn.gate.bias", {H}, R::kGateBias, i});
    }
    t.push_back({p + "mlp_norm.weight", {D}, R::kMlpNorm, i});
    t.push_back({p + "mlp.w1.weight", {F, D}, R::kW1, i});
    t.push_back({p + "mlp.w2.weight", {D, F}, R::kW2, i});
  }
  t.push_back({"norm.weight", {D}, R::kNorm});
  t.push_back({"lm_head.weight", {V, D}, R::kLmHead});
  return t;
}

void ExpectSameTable(const ModelConfig& c, const std::string& what) {
  const std::vector<FlatstateTensor> want = LegacyTable(c);
  const std::vector<FlatstateTensor> got = FlatstateTensorTable(c);
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t j = 0; j < want.size(); ++j) {
    EXPECT_EQ(got[j].name, want[j].name) << what << " row " << j;
    EXPECT_EQ(got[j].shape, want[j].shape) << what << " " << want[j].name;
    EXPECT_EQ(got[j].role, want[j].role) << what << " " << want[j].name;
    EXPECT_EQ(got[j].layer, want[j].layer) << what << " " << want[j].name;
  }
}

// Every flatstate-format config.json (model_type "flatstate") under `dir`/*/; models/ also
// ships a Hugging Face folder (shakespeare-gated-deltanet), which has its own arch test.
std::vector<std::string> ConfigPaths(const std::string& dir) {
  std::vector<std::string> paths;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string p = entry.path().string() + "/config.json";
    if (!std::filesystem::exists(p)) continue;
    absl::StatusOr<std::string> text = ReadWholeFile(p);
    EXPECT_TRUE(text.ok()) << text.status();
    if (!text.ok()) continue;
    const nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.value("model_type", "") == "flatstate") paths.push_back(p);
  }
  return paths;
}

void ExpectSameForConfigsUnder(const std::string& dir, size_t at_least) {
  const std::vector<std::string> paths = ConfigPaths(dir);
  EXPECT_GE(paths.size(), at_least) << dir;
  for (const std::string& path : paths) {
    absl::StatusOr<std::string> text = ReadWholeFile(path);
    ASSERT_TRUE(text.ok()) << text.status();
    absl::StatusOr<ModelConfig> c = ParseModelConfig(*text, path);
    ASSERT_TRUE(c.ok()) << c.status();
    ASSERT_EQ(c->architecture, "flatstate") << path;
    ExpectSameTable(*c, path);
  }
}

TEST(FlatstateTensorTableTest, ShippedModelsMatchTheHandWrittenTable) {
  ExpectSameForConfigsUnder(std::string(FLATSTATE_SOURCE_DIR) + "/models", 8);
}

TEST(FlatstateTensorTableTest, TestDataModelsMatchTheHandWrittenTable) {
  ExpectSameForConfigsUnder(std::string(FLATSTATE_SOURCE_DIR) + "/tests/data/models", 4);
}

constexpr AttentionKind kKinds[] = {AttentionKind::kSoftmax,   AttentionKind::kLinearElu,
                                    AttentionKind::kCosformer, AttentionKind::kCosine,
                                    AttentionKind::kFavor,     AttentionKind::kGated,
                                    AttentionKind::kWindow,    AttentionKind::kHybrid};

ModelConfig Small(AttentionKind kind, int conv) {
  ModelConfig c;
  c.attention_kind = kind;
  c.hidden_size = 24;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 3;
  c.head_dim = 8;
  c.intermediate_size = 40;
  c.conv_kernel_size = conv;
  c.favor_num_features = 10;
  c.rfa_num_features = 6;
  return c;
}

TEST(FlatstateTensorTableTest, EveryKindWithAndWithoutConvMatches) {
  for (AttentionKind kind : kKinds) {
    for (int conv : {0, 1, 3}) {
      ExpectSameTable(Small(kind, conv), absl::StrCat(AttentionKindName(kind), " K=", conv));
    }
  }
}

TEST(FlatstateTensorTableTest, HybridLayoutsMatch) {
  for (HybridLayout layout : {HybridLayout::kAlternate, HybridLayout::kSum}) {
    ModelConfig c = Small(AttentionKind::kHybrid, 4);
    c.hybrid_layout = layout;
    ExpectSameTable(c, absl::StrCat("hybrid layout ", static_cast<int>(layout)));
  }
}

// layer_types: softmax layers have no conv and no kind-specific tensors.
TEST(FlatstateTensorTableTest, LayerTypesMatch) {
  const std::vector<std::vector<bool>> patterns = {
      {false, true, false}, {true, false, true}, {true, true, true}, {false, false, false}};
  for (AttentionKind kind : {AttentionKind::kLinearElu, AttentionKind::kCosformer,
                             AttentionKind::kCosine, AttentionKind::kFavor}) {
    for (const std::vector<bool>& softmax : patterns) {
      for (int conv : {0, 4}) {
        ModelConfig c = Small(kind, conv);
        c.softmax_layer = softmax;
        ExpectSameTable(c, absl::StrCat(AttentionKindName(kind), " K=", conv, " softmax layers ",
                                        softmax[0], softmax[1], softmax[2]));
      }
    }
  }
}

// gemm marks exactly the layers' GEMM weights (stored as torch_dtype says; tools/export.py's
// BF16 / quantisable tensors).
TEST(FlatstateTensorTableTest, GemmMarksTheLayersGemmWeights) {
  using R = FlatstateTensor::Role;
  for (AttentionKind kind : kKinds) {
    for (const FlatstateTensor& t : FlatstateTensorTable(Small(kind, 3))) {
      const bool gemm =
          t.role == R::kWqkv || t.role == R::kWo || t.role == R::kW1 || t.role == R::kW2;
      EXPECT_EQ(t.gemm, gemm) << t.name;
    }
  }
}

TEST(FlatstateTensorTableTest, MalformedTableTextIsInvalidArgument) {
  const std::string ok_entry = R"({"name": "x.{i}", "role": "w1", "gemm": true,
                                   "shape": ["intermediate_size", "hidden_size"]})";
  const auto table = [](const std::string& per_layer) {
    return absl::StrCat(R"({"before_layers": [], "after_layers": [], "per_layer": [)", per_layer,
                        "]}");
  };
  const ModelConfig c = Small(AttentionKind::kGated, 3);
  absl::StatusOr<std::vector<FlatstateTensor>> good =
      FlatstateTensorTableFromJson(table(ok_entry), c);
  ASSERT_TRUE(good.ok()) << good.status();
  ASSERT_EQ(good->size(), 3u);
  EXPECT_EQ((*good)[2].name, "x.2");
  EXPECT_EQ((*good)[2].shape, (std::vector<int64_t>{40, 24}));
  for (const std::string& bad : {
           std::string("not json"),
           std::string(R"({"per_layer": []})"),
           table(R"({"name": "x.{i}", "role": "nope", "shape": [1]})"),
           table(R"({"name": "x.{i}", "role": "w1", "shape": ["hidden"]})"),
           table(R"({"name": "x.{i}", "role": "w1", "shape": ["0*hidden_size"]})"),
           table(R"({"name": "x.{i}", "role": "norm", "shape": ["*hidden_size"]})"),
           table(R"({"name": "x.{i}", "role": "norm", "shape": [0]})"),
           table(R"({"name": "x.{i}", "role": "w1", "shape": [1, 2]})"),
           table(R"({"name": "x.{i}", "role": "norm", "gemm": true, "shape": [1, 2]})"),
           table(R"({"name": "x", "role": "norm", "shape": [1]})"),
           table(R"({"name": "x.{i}", "role": "norm", "shape": [1], "kinds": ["nope"]})"),
           table(R"({"name": "x.{i}", "role": "norm", "shape": [1], "extra": 1})"),
       }) {
    EXPECT_EQ(FlatstateTensorTableFromJson(bad, c).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

}  // namespace
}  // namespace flatstate
