// Model files that store their layer GEMM weights quantised (config torch_dtype "int8" / "int4";
// docs/model-format.md "Stored int8 and int4"), on random models of every attention kind: such a
// file runs as its type by default and computes exactly, every logit and every sampled token,
// what its F32 original computes at that type; f32 / bf16 start from the dequantised values; the
// other integer type is refused. The checked-in fixture tests/data/models/tiny-gated-q* (written
// by tools/export.py) checks the same across the two languages. CUDA: skipped without a GPU.
#include <filesystem>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "engine/runtime/engine.h"
#include "gtest/gtest.h"
#include "tests/engine/runtime/engine_test_util.h"

namespace flatstate::testing {
namespace {

TorchDtype Stored(WeightDtype d) {
  return d == WeightDtype::kInt4 ? TorchDtype::kInt4 : TorchDtype::kInt8;
}

// `kind`'s random model (seed 7, as RandomModelDir) with torch_dtype int8 / int4: the same fp32
// values, the GEMM weights stored quantised. With `dequantised_f32`, an F32 file holding the
// values the quantised weights stand for (float(q) * scale) instead.
std::string QuantModelDir(AttentionKind kind, WeightDtype dtype, bool dequantised_f32 = false) {
  ModelConfig cfg = SmallConfig(kind);
  cfg.torch_dtype = Stored(dtype);
  const std::string dir = TempDir() + "/" + std::string(AttentionKindName(kind));
  std::vector<NamedTensor> tensors = RandomModelTensors(cfg, 7);
  if (dequantised_f32) {
    cfg.torch_dtype = TorchDtype::kFloat32;
    for (NamedTensor& t : tensors) {
      if (t.quantized == TorchDtype::kFloat32) continue;
      t.data = DequantizedValues(t);
      t.quantized = TorchDtype::kFloat32;
    }
  }
  EXPECT_TRUE(WriteRandomModel(dir, cfg, 7).ok());
  WriteSafetensors(dir + "/model.safetensors", tensors);
  return dir;
}

EngineOptions WithType(std::optional<WeightDtype> dtype, Device device = Device::kCpu) {
  EngineOptions o;
  o.threads = 2;
  o.kv_blocks = 512;
  o.weight_dtype = dtype;
  o.device = device;
  return o;
}

class StoredQuantTest : public ::testing::TestWithParam<std::tuple<AttentionKind, WeightDtype>> {
 protected:
  AttentionKind kind() const { return std::get<0>(GetParam()); }
  WeightDtype dtype() const { return std::get<1>(GetParam()); }
};

TEST_P(StoredQuantTest, RunsAsItsTypeWithTheBitsOfItsF32OriginalAtThatType) {
  auto stored = MakeEngineWith(QuantModelDir(kind(), dtype()), WithType(std::nullopt));
  auto loaded = MakeEngine(RandomModelDir(kind()), 2, 512, dtype());
  ASSERT_TRUE(stored && loaded);
  EXPECT_EQ(stored->config().torch_dtype, Stored(dtype()));
  const auto logits =
      ExpectStoredRunsAsItsF32OriginalAtItsType(stored.get(), loaded.get(), dtype());
  // The same type named explicitly is the default's engine.
  auto named = MakeEngineWith(stored->model().dir(), WithType(dtype()));
  ASSERT_TRUE(named);
  EXPECT_EQ(named->fingerprint(), stored->fingerprint());
  EXPECT_EQ(ScoreLogits(named.get()), logits);
}

// f32 and bf16 from a quantised file: the dequantised values float(q) * scale, so they equal an
// F32 file holding those values run at that type.
TEST_P(StoredQuantTest, F32AndBf16StartFromTheDequantisedValues) {
  const std::string dir = QuantModelDir(kind(), dtype());
  const std::string deq = QuantModelDir(kind(), dtype(), /*dequantised_f32=*/true);
  for (WeightDtype as : {WeightDtype::kF32, WeightDtype::kBf16}) {
    auto from_quant = MakeEngineWith(dir, WithType(as));
    auto from_f32 = MakeEngineWith(deq, WithType(as));
    ASSERT_TRUE(from_quant && from_f32);
    EXPECT_EQ(from_quant->weight_dtype(), as);
    EXPECT_EQ(ScoreLogits(from_quant.get()), ScoreLogits(from_f32.get())) << WeightDtypeName(as);
    EXPECT_EQ(from_quant->fingerprint(),
              as == WeightDtype::kF32
                  ? from_quant->model().fingerprint()
                  : from_quant->model().fingerprint() + "-" + WeightDtypeName(as));
  }
}

TEST_P(StoredQuantTest, TheOtherIntegerTypeIsRefused) {
  const std::string dir = QuantModelDir(kind(), dtype());
  const WeightDtype other = dtype() == WeightDtype::kInt8 ? WeightDtype::kInt4 : WeightDtype::kInt8;
  auto model = Model::Load(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  auto e = Engine::Create(std::move(*model), WithType(other));
  ASSERT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(e.status().message());
  EXPECT_NE(msg.find(dir + "/config.json: torch_dtype \"" +
                     std::string(TorchDtypeName(Stored(dtype()))) + "\""),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find(std::string("cannot run as weight_dtype ") + WeightDtypeName(other)),
            std::string::npos)
      << msg;
}

INSTANTIATE_TEST_SUITE_P(
    KindsAndTypes, StoredQuantTest,
    ::testing::Combine(::testing::ValuesIn(AllKinds()),
                       ::testing::Values(WeightDtype::kInt8, WeightDtype::kInt4)),
    [](const ::testing::TestParamInfo<std::tuple<AttentionKind, WeightDtype>>& info) {
      return std::string(AttentionKindName(std::get<0>(info.param))) + "_" +
             WeightDtypeName(std::get<1>(info.param));
    });

// Across the two languages: tests/data/models/tiny-gated-q-int8 and -int4 are
// tools/export.py's --dtype int8 / int4 of tests/data/models/tiny-gated-q (gated: the fused gate
// rows; hidden 48 and intermediate 75: partial blocks and an odd k; some rows with exact halves,
// tools/tests/test_export_quant.py rebuilds them byte for byte). The Python quantisation and the
// C++ one at load give the same logits, bit for bit.
TEST(StoredQuantFixture, PythonExportEqualsTheEnginesQuantisationAtLoad) {
  const std::filesystem::path models =
      std::filesystem::path(FLATSTATE_SOURCE_DIR) / "tests/data/models";
  for (WeightDtype dtype : {WeightDtype::kInt8, WeightDtype::kInt4}) {
    const std::string name = std::string("tiny-gated-q-") + WeightDtypeName(dtype);
    auto stored = MakeEngineWith((models / name).string(), WithType(std::nullopt));
    auto loaded = MakeEngine((models / "tiny-gated-q").string(), 2, 512, dtype);
    ASSERT_TRUE(stored && loaded) << name;
    EXPECT_EQ(stored->weight_dtype(), dtype);
    EXPECT_EQ(stored->config().attention_kind, AttentionKind::kGated);
    const auto logits = ScoreLogits(stored.get(), 100);
    ASSERT_EQ(logits.size(), 100u * 256u);
    EXPECT_EQ(logits, ScoreLogits(loaded.get(), 100)) << name;
  }
}

// CUDA: a stored file dequantises its quants to the device weight its F32 original gets at that
// type, so the two engines run the same GEMMs on the same values: the same logits, bit for bit.
TEST(StoredQuantCuda, StoredFileEqualsItsF32OriginalAtThatType) {
  SKIP_UNLESS_DEVICE(Device::kCuda);
  for (AttentionKind kind : {AttentionKind::kLinearElu, AttentionKind::kGated}) {
    for (WeightDtype dtype : {WeightDtype::kInt8, WeightDtype::kInt4}) {
      auto stored =
          MakeEngineWith(QuantModelDir(kind, dtype), WithType(std::nullopt, Device::kCuda));
      auto loaded = MakeEngineWith(RandomModelDir(kind), WithType(dtype, Device::kCuda));
      ASSERT_TRUE(stored && loaded);
      const auto logits = ScoreLogits(stored.get());
      ASSERT_FALSE(logits.empty());
      EXPECT_EQ(logits, ScoreLogits(loaded.get()))
          << AttentionKindName(kind) << " " << WeightDtypeName(dtype);
    }
  }
}

}  // namespace
}  // namespace flatstate::testing
