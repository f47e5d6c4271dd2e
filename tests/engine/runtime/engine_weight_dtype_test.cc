// Engines whose layer weights are quantised at load (EngineOptions::weight_dtype = bf16 | int8 |
// int4),
// on random-weight models of every attention kind: a session's outputs stay bit-identical
// whatever shares its step, checkpoints continue exactly on another engine of the same type and
// are refused by one of another type, and the logits stay close to the f32 engine's.
#include <cmath>
#include <string>
#include <tuple>

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
  for (SamplingParams sp : {SamplingParams{0.f, 0, 1.f, 0}, SamplingParams{0.9f, 40, 0.95f, 11}}) {
    SessionState alone = e->NewSession(sp);
    const auto prompt = Tokens(37, 1);
    const auto expect = GenerateAlone(e.get(), &alone, prompt, 30);
    e->ReleaseSession(&alone);
    SessionState s = e->NewSession(sp);
    ASSERT_TRUE(e->Append(&s, prompt).ok());
    EXPECT_EQ(GenerateInCrowd(e.get(), &s, 30, 12), expect) << "temperature " << sp.temperature;
    e->ReleaseSession(&s);
  }
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
  double err = 0, norm = 0;
  for (size_t i = 0; i < got->size(); ++i) {
    err += ((*got)[i] - (*want)[i]) * ((*got)[i] - (*want)[i]);
    norm += (*want)[i] * (*want)[i];
  }
  const double rel = std::sqrt(err / norm);
  const double bound = dtype_ == WeightDtype::kBf16   ? 0.01
                       : dtype_ == WeightDtype::kInt8 ? 0.04
                                                      : 0.5;
  EXPECT_LE(rel, bound) << AttentionKindName(kind_) << " " << WeightDtypeName(dtype_);
  RecordProperty("logit_rel_err", std::to_string(rel));
  e->ReleaseSession(&a);
  f32->ReleaseSession(&b);
}

INSTANTIATE_TEST_SUITE_P(
    KindsAndTypes, WeightDtypeTest,
    ::testing::Combine(::testing::ValuesIn(AllKinds()),
                       ::testing::Values(WeightDtype::kBf16, WeightDtype::kInt8,
                                         WeightDtype::kInt4)),
    [](const ::testing::TestParamInfo<std::tuple<AttentionKind, WeightDtype>>& info) {
      return std::string(AttentionKindName(std::get<0>(info.param))) + "_" +
             WeightDtypeName(std::get<1>(info.param));
    });

TEST(WeightDtypeErrors, CudaRefusesQuantisedWeights) {
  if (!CheckDevice(Device::kCuda).ok()) GTEST_SKIP() << CheckDevice(Device::kCuda);
  auto model = Model::Load(RandomModelDir(AttentionKind::kLinearElu));
  ASSERT_TRUE(model.ok());
  EngineOptions o;
  o.device = Device::kCuda;
  o.weight_dtype = WeightDtype::kInt8;
  auto e = Engine::Create(std::move(*model), o);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kUnimplemented) << e.status();
}

}  // namespace
}  // namespace flatstate::testing
