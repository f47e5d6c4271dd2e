// ModelRegistry unit tests, without gRPC: loading a models folder, lookups by name and
// fingerprint, the default model, and the errors.
#include "server/core/model_registry.h"

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

// A folder that does not load is skipped and named; a Hugging Face Llama folder loads beside the
// byte-level models, and its unknown config keys are listed once.
TEST(ModelRegistryTest, SkipsBadFoldersAndNamesThemAndLoadsHuggingFaceFolders) {
  namespace fs = std::filesystem;
  const std::string dir = testing::TempDir() + "/registry_mixed";
  fs::remove_all(dir);
  ASSERT_TRUE(testing::WriteRandomModel(dir + "/a-linear-elu",
                                        testing::SmallConfig(AttentionKind::kLinearElu), 2)
                  .ok());
  fs::create_directories(dir + "/broken");
  ASSERT_TRUE(testing::WriteFile(dir + "/broken/config.json",
                                 R"({"architectures": ["NoSuchForCausalLM"]})"));
  const std::string tiny = std::string(FLATSTATE_SOURCE_DIR) + "/tests/data/hf_llama_tiny";
  fs::create_directories(dir + "/llama");
  for (const auto& e : fs::directory_iterator(tiny)) {
    if (e.is_regular_file())
      fs::copy_file(e.path(), dir + "/llama/" + e.path().filename().string());
  }
  std::string config = testing::ReadFile(dir + "/llama/config.json");
  config.insert(config.find('{') + 1, "\"rope_new_thing\": 1,");
  ASSERT_TRUE(testing::WriteFile(dir + "/llama/config.json", config));

  auto reg = ModelRegistry::Load(dir, Small(), "");
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ(reg->Names(), "a-linear-elu, llama");
  ASSERT_EQ(reg->notes().size(), 2u);
  EXPECT_NE(reg->notes()[0].find("skipped model folder '" + dir + "/broken'"), std::string::npos)
      << reg->notes()[0];
  EXPECT_NE(reg->notes()[0].find("NoSuchForCausalLM"), std::string::npos) << reg->notes()[0];
  EXPECT_EQ(reg->notes()[1], "model 'llama': config.json keys ignored: rope_new_thing");
  EXPECT_EQ(reg->Find("llama")->config().vocab_size, 512);

  const std::string only_bad = testing::TempDir() + "/registry_only_bad";
  fs::remove_all(only_bad);
  fs::create_directories(only_bad + "/broken");
  ASSERT_TRUE(testing::WriteFile(only_bad + "/broken/config.json", "{"));
  auto none = ModelRegistry::Load(only_bad, Small(), "");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("no model loaded"), std::string::npos);
}

// Threads of this process (Linux: /proc/self/task).
int ProcessThreads() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// Every model's engine shares one pool of --threads threads: loading two models with threads = 3
// adds that pool's workers once, not once per model.
TEST(ModelRegistryTest, ModelsShareOneThreadPool) {
  EngineOptions o = Small();
  o.threads = 3;
  const int before = ProcessThreads();
  auto reg = ModelRegistry::Load(TwoModels(), o, "");
  ASSERT_TRUE(reg.ok()) << reg.status();
  ASSERT_EQ(reg->models().size(), 2u);
  const int added = ProcessThreads() - before;
  {
    // A pool of 3 as an engine would make it on its own, for comparison.
    ThreadPool alone(3);
    EXPECT_EQ(added, ProcessThreads() - before - added);
  }
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
