// Model::Load on model files that store their layer GEMM weights quantised (config torch_dtype
// "int8" / "int4", docs/model-format.md "Stored int8 and int4"): the quants and scales are bound
// in place, and every malformed case is an InvalidArgument naming the file and the tensor.
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/model_writer.h"

namespace flatstate {
namespace {

using ::testing::HasSubstr;
using testing::NamedTensor;

// Small, with a partial last block everywhere (k = 8) and an odd k (w2: k = 75, int4's pad
// nibble).
ModelConfig QuantConfig(TorchDtype dtype) {
  ModelConfig c;
  c.attention_kind = AttentionKind::kLinearElu;
  c.hidden_size = 8;
  c.num_attention_heads = 2;
  c.head_dim = 4;
  c.num_hidden_layers = 2;
  c.intermediate_size = 75;
  c.conv_kernel_size = 4;
  c.torch_dtype = dtype;
  return c;
}

// A model folder holding `tensors` (as stored: ExpandQuantized) after `edit`; removed on
// destruction.
class QuantModel {
 public:
  explicit QuantModel(TorchDtype dtype,
                      const std::function<void(std::vector<NamedTensor>&)>& edit = nullptr) {
    root_ = testing::TempDir();
    dir_ = root_ + "/q";
    const ModelConfig cfg = QuantConfig(dtype);
    EXPECT_TRUE(testing::WriteRandomModel(dir_, cfg, 7).ok());
    std::vector<NamedTensor> t = testing::ExpandQuantized(testing::RandomModelTensors(cfg, 7));
    if (edit) edit(t);
    testing::WriteSafetensors(weights(), t);
  }
  ~QuantModel() { std::filesystem::remove_all(root_); }
  QuantModel(const QuantModel&) = delete;
  QuantModel& operator=(const QuantModel&) = delete;

  std::string dir() const { return dir_; }
  std::string weights() const { return dir_ + "/model.safetensors"; }
  absl::StatusOr<std::unique_ptr<Model>> Load() const { return Model::Load(dir_); }

 private:
  std::string root_, dir_;
};

NamedTensor& Find(std::vector<NamedTensor>& t, const std::string& name) {
  for (NamedTensor& x : t) {
    if (x.name == name) return x;
  }
  ADD_FAILURE() << "no tensor " << name;
  return t.front();
}

TEST(ModelLoaderQuant, BindsQuantsAndScalesInPlace) {
  for (TorchDtype dtype : {TorchDtype::kInt8, TorchDtype::kInt4}) {
    QuantModel m(dtype);
    auto model = m.Load();
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_EQ((*model)->config().torch_dtype, dtype);
    const std::vector<NamedTensor> stored =
        testing::ExpandQuantized(testing::RandomModelTensors(QuantConfig(dtype), 7));
    const LayerWeights& l = (*model)->weights().layers[1];
    for (const auto& [t, name, n, k] : {std::tuple{&l.wqkv, "layers.1.attn.wqkv.weight", 24, 8},
                                        std::tuple{&l.wo, "layers.1.attn.wo.weight", 8, 8},
                                        std::tuple{&l.w1, "layers.1.mlp.w1.weight", 75, 8},
                                        std::tuple{&l.w2, "layers.1.mlp.w2.weight", 8, 75}}) {
      EXPECT_EQ(t->f32, nullptr);
      EXPECT_EQ(t->bf16, nullptr);
      ASSERT_NE(t->q, nullptr);
      ASSERT_NE(t->scale, nullptr);
      EXPECT_EQ(t->n, n);
      EXPECT_EQ(t->k, k);
      const int64_t row = dtype == TorchDtype::kInt4 ? (k + 1) / 2 : k, nb = (k + 31) / 32;
      std::vector<NamedTensor> copy = stored;
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(t->q), n * row), Find(copy, name).raw);
      EXPECT_EQ(std::vector<float>(t->scale, t->scale + n * nb),
                Find(copy, std::string(name) + "_scale").data);
    }
    // Norms and the rest stay F32.
    EXPECT_NE((*model)->weights().layers[0].attn_norm, nullptr);
    EXPECT_NE((*model)->weights().lm_head, nullptr);
  }
}

struct BadCase {
  std::string what;
  TorchDtype dtype;
  std::function<void(std::vector<NamedTensor>&)> edit;
  std::vector<std::string> contains;  // after "<weights path>: "
};

TEST(ModelLoaderQuant, MalformedQuantisedWeightsNameFileAndTensor) {
  const TorchDtype i8 = TorchDtype::kInt8, i4 = TorchDtype::kInt4;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::string wo = "layers.0.attn.wo.weight", w2 = "layers.1.mlp.w2.weight";
  const std::vector<BadCase> cases = {
      {"int8 quant -128",
       i8,
       [&](auto& t) { Find(t, wo).raw[13] = static_cast<char>(-128); },
       {"tensor '" + wo +
        "': quant -128 at [1, 5] is out of range (int8 quants are in [-127, "
        "127])"}},
      {"int4 nibble 0",
       i4,
       [&](auto& t) { Find(t, wo).raw[5] = static_cast<char>(0x80); },  // row 1, k = 2
       {"tensor '" + wo + "': quant -8 (nibble 0) at [1, 2] is out of range"}},
      {"int4 pad nibble",
       i4,
       [&](auto& t) { Find(t, w2).raw[37] = static_cast<char>(0x98); },  // row 0's last byte
       {"tensor '" + w2 + "': the pad nibble of row 0", "is 9, expected 8"}},
      {"NaN scale",
       i8,
       [&](auto& t) { Find(t, wo + "_scale").data[3] = nan; },
       {"tensor '" + wo + "_scale': scale nan at [3, 0] is not a finite number >= 0"}},
      {"infinite scale",
       i4,
       [&](auto& t) { Find(t, w2 + "_scale").data[4] = inf; },
       {"tensor '" + w2 + "_scale': scale inf at [1, 1] is not a finite number >= 0"}},
      {"negative scale",
       i8,
       [&](auto& t) { Find(t, w2 + "_scale").data[0] = -0.5f; },
       {"tensor '" + w2 + "_scale': scale -0.5 at [0, 0]"}},
      {"missing scale",
       i8,
       [&](auto& t) { std::erase_if(t, [&](auto& x) { return x.name == wo + "_scale"; }); },
       {"tensor '" + wo + "_scale' is missing (expected F32 [8, 1]",
        "the per-block scales of the int8 weight '" + wo + "'"}},
      {"scale shape",
       i4,
       [&](auto& t) {
         NamedTensor& s = Find(t, w2 + "_scale");
         s.shape = {8, 2};
         s.data.resize(16);
       },
       {"tensor '" + w2 + "_scale': expected shape [8, 3], got [8, 2]"}},
      {"scale dtype",
       i8,
       [&](auto& t) { Find(t, wo + "_scale").bf16 = true; },
       {"tensor '" + wo +
        "_scale': unsupported dtype 'BF16' (expected F32: the per-block "
        "scales of the int8 weight '" +
        wo + "')"}},
      {"F32 weight in an int8 file",
       i8,
       [&](auto& t) {
         NamedTensor& q = Find(t, wo);
         q.raw_dtype.clear();
         q.data.assign(64, 0.f);
         q.shape = {8, 8};
       },
       {"tensor '" + wo + "': unsupported dtype 'F32' (expected I8: ",
        "config.json has torch_dtype \"int8\""}},
      {"I8 quants in an int4 file",
       i4,
       [&](auto& t) {
         NamedTensor& q = Find(t, wo);
         q.raw_dtype = "I8";
       },
       {"tensor '" + wo + "': unsupported dtype 'I8' (expected U8: ",
        "config.json has torch_dtype \"int4\"", "two int4 quants per byte"}},
      {"int4 quants one per byte",
       i4,
       [&](auto& t) {
         NamedTensor& q = Find(t, w2);
         q.shape = {8, 75};
         q.raw.assign(8 * 75, static_cast<char>(0x88));
       },
       {"tensor '" + w2 + "': expected shape [8, 38], got [8, 75]"}},
  };
  for (const BadCase& c : cases) {
    QuantModel m(c.dtype, c.edit);
    auto model = m.Load();
    ASSERT_FALSE(model.ok()) << c.what;
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument) << c.what;
    const std::string msg(model.status().message());
    EXPECT_THAT(msg, HasSubstr(m.weights() + ": ")) << c.what;
    for (const std::string& part : c.contains) EXPECT_THAT(msg, HasSubstr(part)) << c.what;
  }
}

// A scale tensor in a float32 file is an unexpected tensor, and the message says which files
// have them.
TEST(ModelLoaderQuant, ScaleTensorInAFloatFileIsUnexpected) {
  const std::string root = testing::TempDir(), dir = root + "/f";
  ModelConfig cfg = QuantConfig(TorchDtype::kFloat32);
  ASSERT_TRUE(testing::WriteRandomModel(dir, cfg, 7).ok());
  std::vector<NamedTensor> t = testing::RandomModelTensors(cfg, 7);
  NamedTensor extra{"layers.0.attn.wo.weight_scale", {8, 1}, std::vector<float>(8, 1.f)};
  t.push_back(extra);
  testing::WriteSafetensors(dir + "/model.safetensors", t);
  auto model = Model::Load(dir);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(model.status().message()),
              HasSubstr("unexpected tensor 'layers.0.attn.wo.weight_scale'"));
  EXPECT_THAT(std::string(model.status().message()),
              HasSubstr("scale tensors belong to torch_dtype \"int8\" or \"int4\"; " + dir +
                        "/config.json has \"float32\""));
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace flatstate
