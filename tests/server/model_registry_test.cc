// ModelRegistry unit tests, without gRPC: loading a models folder, lookups by name and
// fingerprint, the default model, and the errors.
#include "server/model_registry.h"

#include <filesystem>

#include "gtest/gtest.h"
#include "tests/util/model_writer.h"

namespace flatstate::server {
namespace {

std::string TwoModels() {
  const std::string dir = testing::TempDir() + "/registry_models";
  EXPECT_TRUE(testing::WriteRandomModel(dir + "/b-softmax",
                                        testing::SmallConfig(AttentionKind::kSoftmax), 1)
                  .ok());
  EXPECT_TRUE(testing::WriteRandomModel(dir + "/a-linear-elu",
                                        testing::SmallConfig(AttentionKind::kLinearElu), 2)
                  .ok());
  return dir;
}

EngineOptions Small() {
  EngineOptions o;
  o.threads = 1;
  o.kv_blocks = 16;
  return o;
}

TEST(ModelRegistryTest, LoadsFindsAndPicksTheDefault) {
  auto reg = ModelRegistry::Load(TwoModels(), Small(), "");
  ASSERT_TRUE(reg.ok()) << reg.status();
  ASSERT_EQ(reg->models().size(), 2u);
  EXPECT_EQ(reg->models()[0]->name, "a-linear-elu");  // sorted
  EXPECT_EQ(reg->default_model(), "a-linear-elu");
  EXPECT_EQ(reg->Names(), "a-linear-elu, b-softmax");
  LoadedModel* soft = reg->Find("b-softmax");
  ASSERT_NE(soft, nullptr);
  EXPECT_FALSE(soft->config().is_linear());
  EXPECT_EQ(reg->Find("nope"), nullptr);
  EXPECT_EQ(reg->FindByFingerprint(soft->fingerprint()), soft);
  EXPECT_EQ(reg->FindByFingerprint("no such fingerprint"), nullptr);
  auto def = reg->Resolve("");
  ASSERT_TRUE(def.ok());
  EXPECT_EQ((*def)->name, "a-linear-elu");
  auto unknown = reg->Resolve("nope");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(unknown.status().message(),
            "model: unknown model 'nope' (loaded: a-linear-elu, b-softmax)");
}

// Quantised weights: each model's fingerprint (what checkpoints carry and FindByFingerprint
// matches) is its engine's, the file's with the type appended.
TEST(ModelRegistryTest, QuantisedEnginesCarryTheTypeInTheFingerprint) {
  EngineOptions o = Small();
  o.weight_dtype = WeightDtype::kInt8;
  auto reg = ModelRegistry::Load(TwoModels(), o, "");
  ASSERT_TRUE(reg.ok()) << reg.status();
  LoadedModel* lin = reg->Find("a-linear-elu");
  ASSERT_NE(lin, nullptr);
  EXPECT_EQ(lin->fingerprint(), lin->engine->model().fingerprint() + "-int8");
  EXPECT_EQ(reg->FindByFingerprint(lin->fingerprint()), lin);
  EXPECT_EQ(reg->FindByFingerprint(lin->engine->model().fingerprint()), nullptr);
}

TEST(ModelRegistryTest, RequestedDefaultMustBeLoaded) {
  auto reg = ModelRegistry::Load(TwoModels(), Small(), "b-softmax");
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ(reg->default_model(), "b-softmax");
  auto bad = ModelRegistry::Load(TwoModels(), Small(), "c");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ModelRegistryTest, EmptyOrMissingFolderIsNotFound) {
  const std::string empty = testing::TempDir() + "/registry_empty";
  std::filesystem::create_directories(empty);
  EXPECT_EQ(ModelRegistry::Load(empty, Small(), "").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ModelRegistry::Load(empty + "/missing", Small(), "").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ModelRegistryTest, EmptyRegistryResolvesNothing) {
  ModelRegistry reg({}, "");
  EXPECT_EQ(reg.Find(""), nullptr);
  EXPECT_EQ(reg.Resolve("").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(reg.Names(), "");
}

TEST(ModelRegistryTest, PickDefaultModel) {
  EXPECT_EQ(*PickDefaultModel({"z", "x-linear_elu", "a"}, ""), "x-linear_elu");
  EXPECT_EQ(*PickDefaultModel({"z", "a"}, ""), "a");
  EXPECT_EQ(*PickDefaultModel({"z", "a"}, "z"), "z");
  EXPECT_EQ(PickDefaultModel({}, "").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace flatstate::server
