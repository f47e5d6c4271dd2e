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
    EXPECT_EQ(w.layers[1].wqkv.f32[0], first("layers.1.attn.wqkv.weight"));
    EXPECT_EQ(w.layers[1].w2.f32[0], first("layers.1.mlp.w2.weight"));
    EXPECT_EQ(w.layers[1].wqkv.bf16, nullptr);
    EXPECT_EQ(mod.config().torch_dtype, TorchDtype::kFloat32);
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

// Rewrites the header of the safetensors file at `path` with `edit`, keeping its data section.
void EditHeader(const std::string& path, const std::function<void(ojson&)>& edit) {
  const std::string b = testing::ReadFile(path);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t{static_cast<uint8_t>(b[i])} << (8 * i);
  ojson h = ojson::parse(b.substr(8, n));
  edit(h);
  std::string text = h.dump();
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  testing::WriteFile(path, testing::RawSafetensors(text, b.substr(8 + n)));
}

ModelConfig Bf16Config(AttentionKind kind = AttentionKind::kLinearElu) {
  ModelConfig c = SmallConfig(kind, kind == AttentionKind::kSoftmax ? 0 : 4);
  c.torch_dtype = TorchDtype::kBfloat16;
  return c;
}

// torch_dtype "bfloat16": the four GEMM weights of every layer are BF16 and reach the engine as
// their bits; every other tensor is F32 as before. The fingerprint is over the new bytes.
TEST(ModelLoaderTest, LoadsBf16GemmWeights) {
  for (AttentionKind kind : {AttentionKind::kSoftmax, AttentionKind::kLinearElu,
                             AttentionKind::kFavor, AttentionKind::kGated}) {
    SCOPED_TRACE(std::string(AttentionKindName(kind)));
    ModelConfig cfg = Bf16Config(kind);
    cfg.rfa_num_features = 3;
    ModelDir m;
    MakeModel(cfg, &m);
    auto model = Model::Load(m.dir);
    ASSERT_TRUE(model.ok()) << model.status();
    const Model& mod = **model;
    EXPECT_EQ(mod.config().torch_dtype, TorchDtype::kBfloat16);
    const ModelWeights& w = mod.weights();
    size_t bytes = 0;
    for (const NamedTensor& t : m.tensors) {
      bytes += t.data.size() * (t.bf16 ? 2 : 4);
      if (t.name == "layers.1.mlp.w1.weight") {
        ASSERT_TRUE(t.bf16);
        EXPECT_EQ(w.layers[1].w1.f32, nullptr);
        ASSERT_NE(w.layers[1].w1.bf16, nullptr);
        for (size_t i = 0; i < t.data.size(); ++i) {
          ASSERT_EQ(w.layers[1].w1.bf16[i], testing::Bf16Bits(t.data[i])) << i;
          // The writer stored values that are bf16 already: widening gives them back exactly.
          ASSERT_EQ(testing::FromBf16Bits(w.layers[1].w1.bf16[i]), t.data[i]) << i;
        }
      }
      if (t.name == "layers.0.attn_norm.weight") {
        EXPECT_FALSE(t.bf16);
      }
    }
    for (const LayerWeights& l : w.layers) {
      for (const GemmTensor* g : {&l.wqkv, &l.wo, &l.w1, &l.w2}) {
        EXPECT_EQ(g->f32, nullptr);
        EXPECT_NE(g->bf16, nullptr);
      }
      EXPECT_NE(l.attn_norm, nullptr);
      EXPECT_EQ(l.gate_weight != nullptr, kind == AttentionKind::kGated);
    }
    EXPECT_EQ(mod.weight_bytes(), bytes);
    EXPECT_EQ(mod.fingerprint(),
              Sha256Hex(testing::ReadFile(m.config) + testing::ReadFile(m.weights)).substr(0, 32));
    // The F32 model of the same seed is another file, so another fingerprint.
    ModelDir f32;
    ModelConfig cfg32 = cfg;
    cfg32.torch_dtype = TorchDtype::kFloat32;
    MakeModel(cfg32, &f32);
    auto model32 = Model::Load(f32.dir);
    ASSERT_TRUE(model32.ok()) << model32.status();
    EXPECT_NE((*model32)->fingerprint(), mod.fingerprint());
  }
}

// BF16 is only for the layers' GEMM weights and only with torch_dtype "bfloat16"; every other
// combination names the file, the tensor, the dtype found and the one expected.
TEST(ModelLoaderTest, RejectsBf16WhereOnlyF32IsAllowed) {
  struct Case {
    std::string name;
    ModelConfig cfg;
    std::string tensor;
    bool to_bf16;  // mark `tensor` BF16 (else F32) in the writer's tensors
    std::vector<std::string> contains;
  };
  ModelConfig f32 = SmallConfig(), favor = Bf16Config(AttentionKind::kFavor);
  ModelConfig gated = Bf16Config(AttentionKind::kGated);
  gated.rfa_num_features = 3;
  const std::string only = "(expected F32: only the layers' attn.wqkv, attn.wo, mlp.w1 and mlp.w2";
  const std::vector<Case> cases = {
      {"BF16 norm", Bf16Config(), "layers.0.attn_norm.weight", true, {"'BF16'", only}},
      {"BF16 final norm", Bf16Config(), "norm.weight", true, {"'BF16'", only}},
      {"BF16 embeddings", Bf16Config(), "embed.weight", true, {"'BF16'", only}},
      {"BF16 lm_head", Bf16Config(), "lm_head.weight", true, {"'BF16'", only}},
      {"BF16 conv", Bf16Config(), "layers.1.attn.conv", true, {"'BF16'", only}},
      {"BF16 feature_proj", favor, "layers.0.attn.feature_proj", true, {"'BF16'", only}},
      {"BF16 gate", gated, "layers.1.attn.gate.weight", true, {"'BF16'", only}},
      {"BF16 norm in an f32 model", f32, "layers.1.mlp_norm.weight", true, {"'BF16'", only}},
      {"BF16 GEMM weight in a float32 model",
       f32,
       "layers.0.attn.wo.weight",
       true,
       {"unsupported dtype 'BF16' (expected F32", "config.json has torch_dtype \"float32\"",
        "all F32"}},
      {"F32 GEMM weight in a bfloat16 model",
       Bf16Config(),
       "layers.1.mlp.w2.weight",
       false,
       {"unsupported dtype 'F32' (expected BF16", "config.json has torch_dtype \"bfloat16\"",
        "all BF16"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ModelDir m;
    MakeModel(c.cfg, &m);
    std::vector<NamedTensor> tensors = m.tensors;
    bool found = false;
    for (NamedTensor& t : tensors) {
      if (t.name == c.tensor) {
        t.bf16 = c.to_bf16;
        found = true;
      }
    }
    ASSERT_TRUE(found) << c.tensor;
    testing::WriteSafetensors(m.weights, tensors);
    auto model = Model::Load(m.dir);
    ASSERT_FALSE(model.ok());
    const std::string msg(model.status().message());
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument) << msg;
    EXPECT_THAT(msg, HasSubstr(m.weights + ": tensor '" + c.tensor + "'"));
    for (const std::string& part : c.contains) EXPECT_THAT(msg, HasSubstr(part));
  }
  // Another 2-byte type on a GEMM weight of a bfloat16 model: named, BF16 expected.
  ModelDir m;
  MakeModel(Bf16Config(), &m);
  EditHeader(m.weights, [](ojson& h) { h[kWo]["dtype"] = "F16"; });
  auto model = Model::Load(m.dir);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(std::string(model.status().message()),
              HasSubstr(kWo + "': unsupported dtype 'F16' (expected BF16)"));
  // A missing GEMM weight of a bfloat16 model says BF16 is expected.
  EditHeader(m.weights, [](ojson& h) { h.erase(kWo); });
  model = Model::Load(m.dir);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(std::string(model.status().message()), HasSubstr("is missing (expected BF16 [8, 8]"));
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
