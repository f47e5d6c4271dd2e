// Engines whose layer weights are quantised at load (EngineOptions::weight_dtype = bf16 | int8 |
// int4 | bf16dot), on random-weight models of every attention kind: a session's outputs stay
// bit-identical whatever shares its step, checkpoints continue exactly on another engine of the
// same type and are refused by one of another type, and the logits stay close to the f32 engine's.
// Model files that store their GEMM weights as BF16: they run as bf16 with the bits of their F32
// original at bf16, and as f32 / int8 / int4 from the widened values. CUDA runs every type (skipped
// here).
#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "engine/runtime/engine.h"
#include "gtest/gtest.h"
#include "tests/engine/runtime/engine_test_util.h"

namespace flatstate::testing {
namespace {

class WeightDtypeTest : public ::testing::TestWithParam<std::tuple<AttentionKind, WeightDtype>> {
 protected:
  void SetUp() override {
    kind_ = std::get<0>(GetParam());
    dtype_ = std::get<1>(GetParam());
    dir_ = RandomModelDir(kind_);
  }
  std::unique_ptr<Engine> Make(int threads = 2) { return MakeEngine(dir_, threads, 512, dtype_); }

  AttentionKind kind_;
  WeightDtype dtype_;
  std::string dir_;
};

TEST_P(WeightDtypeTest, BatchInvariance) {
  auto e = Make();
  ASSERT_EQ(e->weight_dtype(), dtype_);
  ExpectSameAloneAndInCrowd(e.get());
}

TEST_P(WeightDtypeTest, CheckpointRestoreContinuesExactlyOnTheSameTypeOnly) {
  auto e = Make();
  SessionState s = e->NewSession(SamplingParams{0.8f, 0, 1.f, 42});
  GenerateAlone(e.get(), &s, Tokens(30, 3), 10);
  auto blob = e->Checkpoint(s);
  ASSERT_TRUE(blob.ok()) << blob.status();
  const auto expect = GenerateAlone(e.get(), &s, {}, 20);

  auto e2 = Make(/*threads=*/1);
  EXPECT_EQ(e2->fingerprint(), e->fingerprint());
  auto restored = e2->Restore(*blob);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(GenerateAlone(e2.get(), &*restored, {}, 20), expect);

  // An f32 engine computes other bits: it refuses the checkpoint, and the other way round.
  auto f32 = MakeEngine(dir_);
  EXPECT_EQ(e->fingerprint(), f32->fingerprint() + "-" + WeightDtypeName(dtype_));
  EXPECT_EQ(f32->Restore(*blob).status().code(), absl::StatusCode::kFailedPrecondition);
  SessionState s32 = f32->NewSession({});
  GenerateAlone(f32.get(), &s32, Tokens(5, 4), 1);
  auto blob32 = f32->Checkpoint(s32);
  ASSERT_TRUE(blob32.ok());
  EXPECT_EQ(e->Restore(*blob32).status().code(), absl::StatusCode::kFailedPrecondition);
  f32->ReleaseSession(&s32);
  e->ReleaseSession(&s);
}

// Relative L2 error of all logits of a 48-token prompt against the f32 engine's. Random models
// have unit-scale weights, where quantisation errors are as large as in trained ones.
TEST_P(WeightDtypeTest, LogitsCloseToF32) {
  auto e = Make();
  auto f32 = MakeEngine(dir_);
  const auto prompt = Tokens(48, 8);
  SessionState a = e->NewSession({}), b = f32->NewSession({});
  auto got = e->Score(&a, prompt);
  auto want = f32->Score(&b, prompt);
  ASSERT_TRUE(got.ok() && want.ok());
  ASSERT_EQ(got->size(), want->size());
  const double rel = RelativeL2Error(*got, *want);
  const double bound = dtype_ == WeightDtype::kBf16      ? 0.01
                       : dtype_ == WeightDtype::kBf16Dot ? 0.02
                       : dtype_ == WeightDtype::kInt8    ? 0.04
                                                         : 0.5;
  EXPECT_LE(rel, bound) << AttentionKindName(kind_) << " " << WeightDtypeName(dtype_);
  RecordProperty("logit_rel_err", std::to_string(rel));
  e->ReleaseSession(&a);
  f32->ReleaseSession(&b);
}

INSTANTIATE_TEST_SUITE_P(
    KindsAndTypes, WeightDtypeTest,
    ::testing::Combine(::testing::ValuesIn(AllKinds()),
                       ::testing::Values(WeightDtype::kBf16, WeightDtype::kInt8, WeightDtype::kInt4,
                                         WeightDtype::kBf16Dot)),
    [](const ::testing::TestParamInfo<std::tuple<AttentionKind, WeightDtype>>& info) {
      return std::string(AttentionKindName(std::get<0>(info.param))) + "_" +
             WeightDtypeName(std::get<1>(info.param));
    });

// CUDA runs every type (kernels/cuda/gemm.cu): bf16 on cuBLAS with bf16 activations, int8/int4
// dequantised to fp32 at load; its logits stay as close to the CPU f32 engine's as the type
// allows (looser than the CPU's own bounds above: CUDA's bf16 also rounds the activations).
TEST(WeightDtypeCuda, CudaRunsEveryWeightType) {
  if (!CheckDevice(Device::kCuda).ok()) GTEST_SKIP() << CheckDevice(Device::kCuda);
  const std::string dir = RandomModelDir(AttentionKind::kLinearElu);
  auto f32 = MakeEngine(dir);
  const auto prompt = Tokens(48, 8);
  SessionState b = f32->NewSession({});
  auto want = f32->Score(&b, prompt);
  ASSERT_TRUE(want.ok()) << want.status();
  for (WeightDtype dtype : {WeightDtype::kBf16, WeightDtype::kInt8, WeightDtype::kInt4}) {
    EngineOptions o;
    o.device = Device::kCuda;
    o.weight_dtype = dtype;
    auto e = MakeEngineWith(dir, o);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->fingerprint(), f32->fingerprint() + "-" + WeightDtypeName(dtype));
    SessionState a = e->NewSession({});
    auto got = e->Score(&a, prompt);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_LE(RelativeL2Error(*got, *want), dtype == WeightDtype::kBf16   ? 0.02
                                          : dtype == WeightDtype::kInt8 ? 0.04
                                                                        : 0.5)
        << WeightDtypeName(dtype);
    e->ReleaseSession(&a);
  }
  f32->ReleaseSession(&b);
  // bf16dot is a CPU type: a CUDA engine refuses it at create, naming it.
  EngineOptions o;
  o.device = Device::kCuda;
  o.weight_dtype = WeightDtype::kBf16Dot;
  auto model = Model::Load(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  auto refused = Engine::Create(std::move(*model), o);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("bf16dot"), absl::string_view::npos)
      << refused.status();
}

TEST(WeightDtypeOption, AutoIsTheFilesTypeAndUnknownNamesFail) {
  for (const char* unset : {"", "auto", "AUTO"}) {
    auto d = ParseWeightDtypeOption(unset);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_FALSE(d->has_value()) << unset;
  }
  auto d = ParseWeightDtypeOption("bf16");
  ASSERT_TRUE(d.ok() && d->has_value());
  EXPECT_EQ(**d, WeightDtype::kBf16);
  auto bad = ParseWeightDtypeOption("int2");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("auto"), absl::string_view::npos) << bad.status();
  // Unset on an F32 file: f32, and the model's own fingerprint.
  auto e = MakeEngineWith(RandomModelDir(AttentionKind::kSoftmax), EngineOptions{});
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->weight_dtype(), WeightDtype::kF32);
  EXPECT_EQ(e->fingerprint(), e->model().fingerprint());
}

// ---- model files whose layer GEMM weights are stored as BF16 (config torch_dtype bfloat16) ----

// The folder of `kind`'s random model (seed 7, as RandomModelDir) with torch_dtype bfloat16: the
// same tensors, the GEMM weights rounded to nearest-even bf16 and stored as BF16. With
// `widened_f32`, an F32 file of exactly those (rounded) values instead.
std::string Bf16ModelDir(AttentionKind kind, bool widened_f32 = false) {
  ModelConfig cfg = SmallConfig(kind);
  cfg.torch_dtype = TorchDtype::kBfloat16;
  const std::string dir = TempDir() + "/bf16-" + std::string(AttentionKindName(kind));
  std::vector<NamedTensor> tensors = RandomModelTensors(cfg, 7);
  if (widened_f32) {
    cfg.torch_dtype = TorchDtype::kFloat32;
    for (NamedTensor& t : tensors) t.bf16 = false;
  }
  EXPECT_TRUE(WriteRandomModel(dir, cfg, 7).ok());
  WriteSafetensors(dir + "/model.safetensors", tensors);
  return dir;
}

EngineOptions WithType(std::optional<WeightDtype> dtype) {
  EngineOptions o;
  o.threads = 2;
  o.kv_blocks = 512;
  o.weight_dtype = dtype;
  return o;
}

class StoredBf16Test : public ::testing::TestWithParam<AttentionKind> {};

// A BF16 file runs as bf16 by default and computes exactly what its F32 original does with
// --weight_dtype bf16 (the same nearest-even rounding, at export and at load), every logit and
// every sampled token; it is another model file, so checkpoints do not cross.
TEST_P(StoredBf16Test, RunsAsBf16WithTheBitsOfItsF32OriginalAtBf16) {
  auto stored = MakeEngineWith(Bf16ModelDir(GetParam()), WithType(std::nullopt));
  auto loaded = MakeEngine(RandomModelDir(GetParam()), 2, 512, WeightDtype::kBf16);
  ASSERT_TRUE(stored && loaded);
  EXPECT_EQ(stored->config().torch_dtype, TorchDtype::kBfloat16);
  ExpectStoredRunsAsItsF32OriginalAtItsType(stored.get(), loaded.get(), WeightDtype::kBf16);
}

// Other types from a BF16 file: f32 widens exactly, which on the CPU is bf16's chain (the same
// bits, twice the memory; no fingerprint suffix), except for gated, whose F32 gate rows share
// wqkv's GEMM and are rounded with it at bf16 only; int8 and int4 quantise the widened values, so
// they equal an F32 file holding those values run at that type.
TEST_P(StoredBf16Test, OtherTypesStartFromTheWidenedValues) {
  const std::string dir = Bf16ModelDir(GetParam());
  auto bf16 = MakeEngineWith(dir, WithType(std::nullopt));
  auto f32 = MakeEngineWith(dir, WithType(WeightDtype::kF32));
  ASSERT_TRUE(bf16 && f32);
  EXPECT_EQ(f32->weight_dtype(), WeightDtype::kF32);
  EXPECT_EQ(f32->fingerprint(), f32->model().fingerprint());
  if (GetParam() != AttentionKind::kGated) {
    EXPECT_EQ(ScoreLogits(f32.get()), ScoreLogits(bf16.get()));
  } else {
    EXPECT_LE(RelativeL2Error(ScoreLogits(f32.get()), ScoreLogits(bf16.get())), 1e-3);
  }
  const std::string wide = Bf16ModelDir(GetParam(), /*widened_f32=*/true);
  for (WeightDtype dtype : {WeightDtype::kInt8, WeightDtype::kInt4}) {
    auto from_bf16 = MakeEngineWith(dir, WithType(dtype));
    auto from_f32 = MakeEngineWith(wide, WithType(dtype));
    ASSERT_TRUE(from_bf16 && from_f32);
    EXPECT_EQ(ScoreLogits(from_bf16.get()), ScoreLogits(from_f32.get())) << WeightDtypeName(dtype);
    EXPECT_EQ(from_bf16->fingerprint(),
              from_bf16->model().fingerprint() + "-" + WeightDtypeName(dtype));
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, StoredBf16Test, ::testing::ValuesIn(AllKinds()),
                         [](const ::testing::TestParamInfo<AttentionKind>& info) {
                           return std::string(AttentionKindName(info.param));
                         });

}  // namespace
}  // namespace flatstate::testing
