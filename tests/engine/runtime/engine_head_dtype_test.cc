// The output head's type (EngineOptions::head_dtype), on random-weight models of every attention
// kind: an int8 head keeps a session's outputs bit-identical whatever shares its step, its logits
// stay close to the default head's, and checkpoints cross only between engines with the same head
// type; an explicit f32 head on an F32 file computes the default's bits; bad names name the field.
#include <string>
#include <vector>

#include "engine/runtime/engine.h"
#include "gtest/gtest.h"
#include "tests/engine/runtime/engine_test_util.h"

namespace flatstate::testing {
namespace {

EngineOptions WithHead(std::optional<WeightDtype> head) {
  EngineOptions o;
  o.threads = 2;
  o.kv_blocks = 512;
  o.head_dtype = head;
  return o;
}

class HeadDtypeTest : public ::testing::TestWithParam<AttentionKind> {
 protected:
  void SetUp() override { dir_ = RandomModelDir(GetParam()); }
  std::string dir_;
};

TEST_P(HeadDtypeTest, Int8HeadIsBatchInvariantAndCloseToTheDefault) {
  auto e = MakeEngineWith(dir_, WithHead(WeightDtype::kInt8));
  auto base = MakeEngineWith(dir_, WithHead(std::nullopt));
  ASSERT_NE(e, nullptr);
  ASSERT_NE(base, nullptr);
  EXPECT_EQ(e->fingerprint(), base->fingerprint() + "-head-int8");
  ExpectSameAloneAndInCrowd(e.get());
  // Every logit of a 48-token prompt against the default (f32) head: relative L2 error.
  const auto prompt = Tokens(48, 8);
  SessionState a = e->NewSession({}), b = base->NewSession({});
  auto got = e->Score(&a, prompt);
  auto want = base->Score(&b, prompt);
  ASSERT_TRUE(got.ok() && want.ok());
  ASSERT_EQ(got->size(), want->size());
  EXPECT_NE(*got, *want) << "the int8 head computed the f32 head's logits";
  EXPECT_LE(RelativeL2Error(*got, *want), 0.02) << AttentionKindName(GetParam());
  e->ReleaseSession(&a);
  base->ReleaseSession(&b);
}

TEST_P(HeadDtypeTest, CheckpointsCrossOnlyToTheSameHeadType) {
  auto e = MakeEngineWith(dir_, WithHead(WeightDtype::kInt8));
  SessionState s = e->NewSession(SamplingParams{0.8f, 0, 1.f, 42});
  GenerateAlone(e.get(), &s, Tokens(30, 3), 10);
  auto blob = e->Checkpoint(s);
  ASSERT_TRUE(blob.ok()) << blob.status();
  const auto expect = GenerateAlone(e.get(), &s, {}, 20);
  auto same = MakeEngineWith(dir_, WithHead(WeightDtype::kInt8));
  auto restored = same->Restore(*blob);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(GenerateAlone(same.get(), &*restored, {}, 20), expect);
  auto base = MakeEngineWith(dir_, WithHead(std::nullopt));
  EXPECT_EQ(base->Restore(*blob).status().code(), absl::StatusCode::kFailedPrecondition);
  e->ReleaseSession(&s);
}

INSTANTIATE_TEST_SUITE_P(Kinds, HeadDtypeTest, ::testing::ValuesIn(AllKinds()),
                         [](const ::testing::TestParamInfo<AttentionKind>& info) {
                           return std::string(AttentionKindName(info.param));
                         });

TEST(HeadDtype, ExplicitF32HeadOnAnF32FileComputesTheDefaultsBits) {
  const std::string dir = RandomModelDir(AttentionKind::kSoftmax);
  auto e = MakeEngineWith(dir, WithHead(WeightDtype::kF32));
  auto base = MakeEngineWith(dir, WithHead(std::nullopt));
  const auto prompt = Tokens(20, 2);
  SessionState a = e->NewSession({}), b = base->NewSession({});
  auto got = e->Score(&a, prompt);
  auto want = base->Score(&b, prompt);
  ASSERT_TRUE(got.ok() && want.ok());
  EXPECT_EQ(*got, *want);
  EXPECT_EQ(e->fingerprint(), base->fingerprint() + "-head-f32");
  e->ReleaseSession(&a);
  base->ReleaseSession(&b);
}

TEST(HeadDtype, UnknownNamesNameTheField) {
  auto bad = ParseWeightDtypeOption("int2", "head_dtype");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message().rfind("head_dtype: unknown type 'int2'", 0), 0u) << bad.status();
  auto unset = ParseWeightDtypeOption("auto", "head_dtype");
  ASSERT_TRUE(unset.ok());
  EXPECT_FALSE(unset->has_value());
}

}  // namespace
}  // namespace flatstate::testing
