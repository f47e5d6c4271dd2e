#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "engine/model/safetensors.h"
#include "engine/util/sha256.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/util/model_writer.h"

namespace flatstate {
namespace {

using ::testing::HasSubstr;
using testing::NamedTensor;
using ojson = nlohmann::ordered_json;

ModelConfig SmallConfig(AttentionKind kind = AttentionKind::kLinearElu, int conv = 4) {
  ModelConfig c;
  c.attention_kind = kind;
  c.hidden_size = 8;
  c.num_attention_heads = 2;
  c.head_dim = 4;
  c.num_hidden_layers = 2;
  c.intermediate_size = 16;
  c.conv_kernel_size = conv;
  c.favor_num_features = 6;
  return c;
}

// A model folder whose files the test may then corrupt; removed on destruction.
struct ModelDir {
  ModelDir() = default;
  ModelDir(const ModelDir&) = delete;
  ModelDir& operator=(const ModelDir&) = delete;
  ~ModelDir() {
    if (!root.empty()) std::filesystem::remove_all(root);
  }
  std::string root, dir, config, weights;
  std::vector<NamedTensor> tensors;
};

void MakeModel(const ModelConfig& cfg, ModelDir* m) {
  m->root = testing::TempDir();
  m->dir = m->root + "/tiny";
  EXPECT_TRUE(testing::WriteRandomModel(m->dir, cfg, 7).ok());
  m->config = m->dir + "/config.json";
  m->weights = m->dir + "/model.safetensors";
  m->tensors = testing::RandomModelTensors(cfg, 7);
}

// Rewrites model.safetensors from `tensors` after `edit` changes the header and/or the data.
void RewriteWeights(const ModelDir& m, const std::function<void(ojson&, std::string&)>& edit) {
  ojson header = ojson::object();
  std::string data;
  for (const NamedTensor& t : m.tensors) {
    const size_t begin = data.size();
    data.append(reinterpret_cast<const char*>(t.data.data()), t.data.size() * sizeof(float));
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  edit(header, data);
  std::string text = header.dump();
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  testing::WriteFile(m.weights, testing::RawSafetensors(text, data));
}

void Patch(const std::string& path, size_t offset, const std::string& bytes) {
  std::string b = testing::ReadFile(path);
  b.replace(offset, bytes.size(), bytes);
  testing::WriteFile(path, b);
}

TEST(ModelLoaderTest, LoadsEveryAttentionKind) {
  for (AttentionKind kind : {AttentionKind::kSoftmax, AttentionKind::kLinearElu,
                             AttentionKind::kCosformer, AttentionKind::kCosine,
                             AttentionKind::kFavor}) {
    SCOPED_TRACE(std::string(AttentionKindName(kind)));
    const int conv = kind == AttentionKind::kSoftmax ? 0 : 3;
    const ModelConfig cfg = SmallConfig(kind, conv);
    ModelDir m;
    MakeModel(cfg, &m);
    auto model = Model::Load(m.dir + "/");  // trailing slash is fine
    ASSERT_TRUE(model.ok()) << model.status();
    const Model& mod = **model;
    EXPECT_EQ(mod.name(), "tiny");
    EXPECT_EQ(mod.dir(), m.dir);
    EXPECT_EQ(mod.config().attention_kind, kind);
    EXPECT_EQ(mod.config().conv_kernel_size, conv);
    const ModelWeights& w = mod.weights();
    ASSERT_EQ(w.layers.size(), 2u);
    // Pointers reach the right data: compare first values with what was written.
    auto first = [&](const std::string& name) {
      for (const NamedTensor& t : m.tensors) {
        if (t.name == name) return t.data.at(0);
      }
      ADD_FAILURE() << "no " << name;
      return 0.f;
    };
    EXPECT_EQ(w.embed[0], first("embed.weight"));
    EXPECT_EQ(w.lm_head[0], first("lm_head.weight"));
    EXPECT_EQ(w.norm[0], 1.f);
    EXPECT_EQ(w.layers[1].wqkv[0], first("layers.1.attn.wqkv.weight"));
    EXPECT_EQ(w.layers[1].w2[0], first("layers.1.mlp.w2.weight"));
    EXPECT_EQ(w.layers[0].conv != nullptr, kind != AttentionKind::kSoftmax);
    EXPECT_EQ(w.layers[0].decay_logit != nullptr, kind == AttentionKind::kCosine);
    EXPECT_EQ(w.layers[0].feature_proj != nullptr, kind == AttentionKind::kFavor);
    size_t bytes = 0;
    for (const NamedTensor& t : m.tensors) bytes += t.data.size() * sizeof(float);
    EXPECT_EQ(mod.weight_bytes(), bytes);
    // Fingerprint: SHA-256 of config.json bytes then model.safetensors bytes, 16 bytes in hex.
    const std::string fp =
        Sha256Hex(testing::ReadFile(m.config) + testing::ReadFile(m.weights)).substr(0, 32);
    EXPECT_EQ(mod.fingerprint(), fp);
  }
}

TEST(ModelLoaderTest, FingerprintChangesWithConfigBytes) {
  ModelDir m;
  MakeModel(SmallConfig(), &m);
  auto a = Model::Load(m.dir);
  ASSERT_TRUE(a.ok()) << a.status();
  testing::WriteFile(m.config, testing::ReadFile(m.config) + " ");
  auto b = Model::Load(m.dir);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*a)->fingerprint().size(), 32u);
  EXPECT_NE((*a)->fingerprint(), (*b)->fingerprint());
}

struct CorruptCase {
  std::string name;
  std::function<void(const ModelDir&)> corrupt;
  absl::StatusCode code;
  std::string file;                    // expected in the message: "config.json" / "model..."
  std::vector<std::string> contains;   // tensor or key names and the reason
  ModelConfig cfg = SmallConfig();
};

const std::string kWo = "layers.0.attn.wo.weight";

std::vector<CorruptCase> CorruptCases() {
  const auto kInv = absl::StatusCode::kInvalidArgument;
  return {
      {"truncated file",
       [](const ModelDir& m) {
         std::string b = testing::ReadFile(m.weights);
         testing::WriteFile(m.weights, b.substr(0, b.size() - 4));
       },
       absl::StatusCode::kDataLoss, "model.safetensors", {"lm_head.weight", "out of range"}},
      {"truncated inside header",
       [](const ModelDir& m) {
         testing::WriteFile(m.weights, testing::ReadFile(m.weights).substr(0, 40));
       },
       absl::StatusCode::kDataLoss, "model.safetensors", {"header length", "truncated"}},
      {"oversized header length",
       [](const ModelDir& m) { Patch(m.weights, 0, std::string("\0\0\0\x10\0\0\0\0", 8)); },
       kInv, "model.safetensors", {"oversized header"}},
      {"malformed header JSON", [](const ModelDir& m) { Patch(m.weights, 8, "x"); }, kInv,
       "model.safetensors", {"not valid JSON"}},
      {"out-of-range offsets",
       [](const ModelDir& m) {
         RewriteWeights(m, [](ojson& h, std::string&) {
           h[kWo]["data_offsets"][1] = 1u << 30;
         });
       },
       absl::StatusCode::kDataLoss, "model.safetensors", {kWo, "out of range"}},
      {"overlapping offsets",
       [](const ModelDir& m) {
         RewriteWeights(m, [](ojson& h, std::string&) {
           const size_t b = h["layers.0.attn.wqkv.weight"]["data_offsets"][0].get<size_t>();
           h[kWo]["data_offsets"] = {b, b + 8 * 8 * 4};
         });
       },
       kInv, "model.safetensors", {kWo, "layers.0.attn.wqkv.weight", "overlaps tensor"}},
      {"unknown dtype",
       [](const ModelDir& m) {
         RewriteWeights(m, [](ojson& h, std::string&) { h[kWo]["dtype"] = "F33"; });
       },
       kInv, "model.safetensors", {kWo, "unknown dtype 'F33'"}},
      {"wrong dtype F16",
       [](const ModelDir& m) {
         RewriteWeights(m, [](ojson& h, std::string&) {
           h[kWo]["dtype"] = "F16";
           h[kWo]["shape"] = {8, 16};  // same byte size
         });
       },
       kInv, "model.safetensors", {kWo, "unsupported dtype 'F16'"}},
      {"missing tensor",
       [](const ModelDir& m) {
         RewriteWeights(m, [](ojson& h, std::string&) { h.erase("layers.1.mlp_norm.weight"); });
       },
       kInv, "model.safetensors", {"layers.1.mlp_norm.weight", "missing", "[8]"}},
      {"extra tensor",
       [](const ModelDir& m) {
         RewriteWeights(m, [](ojson& h, std::string& data) {
           h["layers.0.attn.bias"] = {
               {"dtype", "F32"}, {"shape", {8}}, {"data_offsets", {data.size(), data.size() + 32}}};
           data.append(32, '\0');
         });
       },
       kInv, "model.safetensors", {"unexpected tensor 'layers.0.attn.bias'"}},
      {"conv tensor without conv_kernel_size", [](const ModelDir&) {}, kInv, "model.safetensors",
       {"unexpected tensor 'layers.0.attn.conv'"}, [] {
         ModelConfig c = SmallConfig();
         c.conv_kernel_size = 0;
         return c;
       }()},
      {"wrong shape",
       [](const ModelDir& m) {
         RewriteWeights(m, [](ojson& h, std::string&) {
           h["layers.1.mlp.w1.weight"]["shape"] = {8, 16};
         });
       },
       kInv, "model.safetensors",
       {"layers.1.mlp.w1.weight", "expected shape [16, 8], got [8, 16]"}},
      {"misaligned",
       [](const ModelDir& m) {
         RewriteWeights(m, [](ojson& h, std::string& data) {
           auto& off = h["lm_head.weight"]["data_offsets"];
           const size_t b = off[0].get<size_t>(), e = off[1].get<size_t>();
           data.insert(b, 2, '\0');
           off = {b + 2, e + 2};
         });
       },
       kInv, "model.safetensors", {"lm_head.weight", "misaligned"}},
      {"missing config.json", [](const ModelDir& m) { std::remove(m.config.c_str()); },
       absl::StatusCode::kNotFound, "config.json", {}},
      {"missing model.safetensors", [](const ModelDir& m) { std::remove(m.weights.c_str()); },
       absl::StatusCode::kNotFound, "model.safetensors", {}},
      {"bad config value",
       [](const ModelDir& m) {
         ojson c = ojson::parse(testing::ReadFile(m.config));
         c["hidden_size"] = "eight";
         testing::WriteFile(m.config, c.dump());
       },
       kInv, "config.json", {"hidden_size"}},
      {"config not JSON", [](const ModelDir& m) { testing::WriteFile(m.config, "{oops"); }, kInv,
       "config.json", {"not valid JSON"}},
      {"config/weights mismatch",
       [](const ModelDir& m) {
         ojson c = ojson::parse(testing::ReadFile(m.config));
         c["intermediate_size"] = 32;
         testing::WriteFile(m.config, c.dump());
       },
       kInv, "model.safetensors", {"layers.0.mlp.w1.weight", "expected shape [32, 8]"}},
  };
}

TEST(ModelLoaderTest, RejectsCorruptedModels) {
  for (const CorruptCase& c : CorruptCases()) {
    SCOPED_TRACE(c.name);
    ModelDir m;
    MakeModel(c.cfg, &m);
    if (c.name == "conv tensor without conv_kernel_size") {
      // Weights written for conv 4, config says 0.
      ModelConfig with_conv = c.cfg;
      with_conv.conv_kernel_size = 4;
      testing::WriteSafetensors(m.weights, testing::RandomModelTensors(with_conv, 1));
    }
    c.corrupt(m);
    auto model = Model::Load(m.dir);
    ASSERT_FALSE(model.ok());
    const std::string msg(model.status().message());
    EXPECT_EQ(model.status().code(), c.code) << msg;
    EXPECT_THAT(msg, HasSubstr(m.dir + "/" + c.file));
    for (const std::string& part : c.contains) EXPECT_THAT(msg, HasSubstr(part));
  }
}

TEST(ModelLoaderTest, CosineNeedsDecayLogitAndFavorNeedsFeatureProj) {
  for (AttentionKind kind : {AttentionKind::kCosine, AttentionKind::kFavor}) {
    ModelDir m;
    MakeModel(SmallConfig(kind), &m);
    const std::string name = kind == AttentionKind::kCosine ? "layers.0.attn.decay_logit"
                                                            : "layers.0.attn.feature_proj";
    RewriteWeights(m, [&](ojson& h, std::string&) { h.erase(name); });
    auto model = Model::Load(m.dir);
    ASSERT_FALSE(model.ok());
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(model.status().message()), HasSubstr(name));
  }
}

}  // namespace
}  // namespace flatstate
