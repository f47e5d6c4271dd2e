#include "engine/model/config.h"

#include <functional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/util/model_writer.h"

namespace flatstate {
namespace {

using ::testing::HasSubstr;
using ojson = nlohmann::ordered_json;

const char kPath[] = "models/x/config.json";

ojson GoodJson() {
  ModelConfig c;
  c.attention_kind = AttentionKind::kCosformer;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.head_dim = 16;
  c.conv_kernel_size = 4;
  return ojson::parse(testing::ConfigJson(c));
}

TEST(ModelConfigTest, ParsesWriterOutput) {
  auto c = ParseModelConfig(GoodJson().dump(), kPath);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->attention_kind, AttentionKind::kCosformer);
  EXPECT_EQ(c->hidden_size, 64);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->conv_kernel_size, 4);
  EXPECT_EQ(c->rms_norm_eps, 1e-5f);
  EXPECT_EQ(c->linear_eps, 1e-6f);
  EXPECT_EQ(c->feature_dim(), 32);
}

// torch_dtype names the layers' GEMM weights' type in model.safetensors: float32 (also when
// absent), bfloat16, int8 or int4 (tools/export.py --dtype).
TEST(ModelConfigTest, TorchDtype) {
  ojson j = GoodJson();
  auto c = ParseModelConfig(j.dump(), kPath);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->torch_dtype, TorchDtype::kFloat32);
  j.erase("torch_dtype");
  c = ParseModelConfig(j.dump(), kPath);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->torch_dtype, TorchDtype::kFloat32);
  j["torch_dtype"] = "bfloat16";
  c = ParseModelConfig(j.dump(), kPath);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->torch_dtype, TorchDtype::kBfloat16);
  EXPECT_EQ(TorchDtypeName(c->torch_dtype), "bfloat16");
  EXPECT_EQ(TorchDtypeName(TorchDtype::kFloat32), "float32");
  // The stored quantised layouts (tools/export.py --dtype int8 | int4).
  for (TorchDtype d : {TorchDtype::kInt8, TorchDtype::kInt4}) {
    j["torch_dtype"] = std::string(TorchDtypeName(d));
    c = ParseModelConfig(j.dump(), kPath);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->torch_dtype, d);
  }
  EXPECT_EQ(TorchDtypeName(TorchDtype::kInt8), "int8");
  EXPECT_EQ(TorchDtypeName(TorchDtype::kInt4), "int4");
}

TEST(ModelConfigTest, AttentionKindNames) {
  for (AttentionKind k : {AttentionKind::kSoftmax, AttentionKind::kLinearElu,
                          AttentionKind::kCosformer, AttentionKind::kCosine, AttentionKind::kFavor,
                          AttentionKind::kGated, AttentionKind::kWindow, AttentionKind::kHybrid}) {
    auto back = AttentionKindFromName(AttentionKindName(k));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, k);
  }
  EXPECT_FALSE(AttentionKindFromName("mamba").ok());
}

struct BadCase {
  std::string what;
  std::function<void(ojson&)> edit;
  std::string key;     // must appear in the message
  std::string reason;  // must appear in the message
};

TEST(ModelConfigTest, RejectsBadConfigs) {
  const std::vector<BadCase> cases = {
      {"missing key", [](ojson& j) { j.erase("num_hidden_layers"); }, "num_hidden_layers",
       "missing"},
      {"missing kind", [](ojson& j) { j.erase("attention_kind"); }, "attention_kind", "missing"},
      {"wrong type", [](ojson& j) { j["hidden_size"] = "64"; }, "hidden_size", "integer"},
      {"float for int", [](ojson& j) { j["intermediate_size"] = 1.5; }, "intermediate_size",
       "integer"},
      {"wrong float type", [](ojson& j) { j["rms_norm_eps"] = "tiny"; }, "rms_norm_eps", "number"},
      {"negative eps", [](ojson& j) { j["linear_eps"] = -1.0; }, "linear_eps", "> 0"},
      {"unknown attention_kind", [](ojson& j) { j["attention_kind"] = "mamba"; }, "attention_kind",
       "mamba"},
      {"hidden not divisible by heads",
       [](ojson& j) {
         j["num_attention_heads"] = 3;
         j.erase("head_dim");
       },
       "hidden_size", "not divisible"},
      {"vocab not 256", [](ojson& j) { j["vocab_size"] = 512; }, "vocab_size", "out of range"},
      {"head_dim mismatch", [](ojson& j) { j["head_dim"] = 8; }, "head_dim", "must equal"},
      {"softmax with conv", [](ojson& j) { j["attention_kind"] = "softmax"; }, "conv_kernel_size",
       "softmax"},
      {"dtype float16", [](ojson& j) { j["torch_dtype"] = "float16"; }, "torch_dtype",
       "must be \"float32\", \"bfloat16\", \"int8\" or \"int4\""},
      {"dtype int16", [](ojson& j) { j["torch_dtype"] = "int16"; }, "torch_dtype", "got \"int16\""},
      {"dtype not a string", [](ojson& j) { j["torch_dtype"] = 32; }, "torch_dtype", "got 32"},
      {"window with conv",
       [](ojson& j) {
         j["attention_kind"] = "window";
         j["window_size"] = 64;
       },
       "conv_kernel_size", "window"},
      {"window without W",
       [](ojson& j) {
         j["attention_kind"] = "window";
         j["conv_kernel_size"] = 0;
       },
       "window_size", "missing"},
      {"hybrid without W", [](ojson& j) { j["attention_kind"] = "hybrid"; }, "window_size",
       "missing"},
      {"zero W",
       [](ojson& j) {
         j["attention_kind"] = "hybrid";
         j["window_size"] = 0;
       },
       "window_size", "out of range"},
      {"gated without R", [](ojson& j) { j["attention_kind"] = "gated"; }, "rfa_num_features",
       "missing"},
      {"bad layout",
       [](ojson& j) {
         j["attention_kind"] = "hybrid";
         j["window_size"] = 8;
         j["hybrid_layout"] = "stack";
       },
       "hybrid_layout", "alternate"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.what);
    ojson j = GoodJson();
    c.edit(j);
    auto r = ParseModelConfig(j.dump(), kPath);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string msg(r.status().message());
    EXPECT_THAT(msg, HasSubstr(kPath));
    EXPECT_THAT(msg, HasSubstr("'" + c.key + "'"));
    EXPECT_THAT(msg, HasSubstr(c.reason));
  }
}

TEST(ModelConfigTest, NotJsonOrNotObject) {
  for (const char* text : {"{", "[1]", ""}) {
    auto r = ParseModelConfig(text, kPath);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(kPath));
  }
}

}  // namespace
}  // namespace flatstate
