// Bad Hugging Face checkpoints (engine/arch/, engine/model/weight_files.h): every malformed or
// unsupported folder is refused at load with an error naming the file and the tensor or the key.
// Each case mutates a copy of tests/data/hf_llama_tiny.
#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "engine/arch/hf_tensors.h"
#include "engine/model/model.h"
#include "engine/model/weight_files.h"
#include "engine/model/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/util/model_writer.h"

namespace flatstate::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

const std::string kTiny = std::string(FLATSTATE_SOURCE_DIR) + "/tests/data/hf_llama_tiny";

// A copy of the tiny folder (its files, not its subfolder) at a fresh temp path.
std::string CopyTiny(const std::string& name) {
  const std::string dir = TempDir() + "/hf_errors_" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(kTiny)) {
    if (e.is_regular_file()) fs::copy_file(e.path(), dir + "/" + e.path().filename().string());
  }
  return dir;
}

void EditJson(const std::string& path, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(ReadFile(path));
  edit(j);
  ASSERT_TRUE(WriteFile(path, j.dump(2)));
}

// The tiny model's tensors widened to F32, in one model.safetensors instead of the shards, after
// `edit`; the config edited by `edit_config`.
std::string SingleFileTiny(const std::string& name,
                           const std::function<void(std::vector<NamedTensor>&)>& edit,
                           const std::function<void(nlohmann::json&)>& edit_config = {}) {
  const std::string dir = CopyTiny(name);
  std::vector<NamedTensor> tensors;
  for (const char* shard :
       {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}) {
    auto f = SafetensorsFile::Open(dir + "/" + shard);
    EXPECT_TRUE(f.ok()) << f.status();
    for (const TensorView& t : (*f)->tensors()) {
      NamedTensor n{t.name, t.shape, std::vector<float>(t.num_elements())};
      for (int64_t i = 0; i < t.num_elements(); ++i) n.data[i] = FromBf16Bits(t.bf16()[i]);
      tensors.push_back(std::move(n));
    }
    fs::remove(dir + "/" + shard);
  }
  fs::remove(dir + "/model.safetensors.index.json");
  edit(tensors);
  WriteSafetensors(dir + "/model.safetensors", tensors);
  if (edit_config) EditJson(dir + "/config.json", edit_config);
  return dir;
}

NamedTensor* Named(std::vector<NamedTensor>& ts, const std::string& name) {
  for (NamedTensor& t : ts) {
    if (t.name == name) return &t;
  }
  ADD_FAILURE() << "no tensor " << name;
  return &ts.front();
}

absl::Status LoadStatus(const std::string& dir) { return Model::Load(dir).status(); }

TEST(HfCheckpointErrors, MissingShardNamesTheIndexAndTheShard) {
  const std::string dir = CopyTiny("missing_shard");
  fs::remove(dir + "/model-00002-of-00002.safetensors");
  const absl::Status st = LoadStatus(dir);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("model.safetensors.index.json"),
                                  HasSubstr("'model-00002-of-00002.safetensors'")));
}

TEST(HfCheckpointErrors, IndexNamingAnAbsentFileOrTheWrongShard) {
  const std::string absent = CopyTiny("index_absent");
  EditJson(absent + "/model.safetensors.index.json",
           [](auto& j) { j["weight_map"]["model.norm.weight"] = "model-00009-of-00009.safetensors"; });
  absl::Status st = LoadStatus(absent);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
  EXPECT_THAT(st.message(), HasSubstr("model-00009-of-00009.safetensors"));

  const std::string wrong = CopyTiny("index_wrong_shard");
  std::string shard_of_norm;
  EditJson(wrong + "/model.safetensors.index.json", [&](auto& j) {
    shard_of_norm = j["weight_map"]["model.norm.weight"];
    j["weight_map"]["model.norm.weight"] = shard_of_norm == "model-00001-of-00002.safetensors"
                                               ? "model-00002-of-00002.safetensors"
                                               : "model-00001-of-00002.safetensors";
  });
  st = LoadStatus(wrong);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(st.message(), HasSubstr("'model.norm.weight'"));

  const std::string escape = CopyTiny("index_escape");
  EditJson(escape + "/model.safetensors.index.json",
           [](auto& j) { j["weight_map"]["model.norm.weight"] = "../model.safetensors"; });
  st = LoadStatus(escape);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(st.message(), HasSubstr("not a file name in the model folder"));
}

TEST(HfCheckpointErrors, TensorShapeDtypeAndPresence) {
  absl::Status st = LoadStatus(SingleFileTiny("shape", [](auto& ts) {
    NamedTensor* k = Named(ts, "model.layers.0.self_attn.k_proj.weight");
    k->shape = {32, 96};
    k->data.resize(32 * 96);
  }));
  EXPECT_THAT(st.message(), AllOf(HasSubstr("model.safetensors: tensor "
                                            "'model.layers.0.self_attn.k_proj.weight'"),
                                  HasSubstr("expected shape [64, 96], got [32, 96]")));

  st = LoadStatus(SingleFileTiny("dtype", [](auto& ts) {
    NamedTensor* n = Named(ts, "model.layers.1.post_attention_layernorm.weight");
    n->raw_dtype = "I32";
    n->raw = std::string(96 * 4, '\0');
  }));
  EXPECT_THAT(st.message(), AllOf(HasSubstr("'model.layers.1.post_attention_layernorm.weight'"),
                                  HasSubstr("unsupported dtype 'I32'")));

  st = LoadStatus(SingleFileTiny("missing", [](auto& ts) {
    ts.erase(std::remove_if(ts.begin(), ts.end(),
                            [](const NamedTensor& t) {
                              return t.name == "model.layers.2.mlp.up_proj.weight";
                            }),
             ts.end());
  }));
  EXPECT_THAT(st.message(),
              AllOf(HasSubstr("'model.layers.2.mlp.up_proj.weight' is missing"),
                    HasSubstr("LlamaForCausalLM")));

  st = LoadStatus(SingleFileTiny("unexpected", [](auto& ts) {
    ts.push_back({"model.layers.0.self_attn.q_norm.weight", {32}, std::vector<float>(32, 1.f)});
  }));
  EXPECT_THAT(st.message(), HasSubstr("unexpected tensor 'model.layers.0.self_attn.q_norm.weight'"));
}

TEST(HfCheckpointErrors, NanInANormIsRefused) {
  const absl::Status st = LoadStatus(SingleFileTiny("nan_norm", [](auto& ts) {
    Named(ts, "model.layers.1.input_layernorm.weight")->data[3] = std::nanf("");
  }));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("'model.layers.1.input_layernorm.weight'"),
                                  HasSubstr("element 3 is nan")));
}

TEST(HfCheckpointErrors, TiedHeadWithLmHeadPresent) {
  const std::string dir = CopyTiny("tied");
  EditJson(dir + "/config.json", [](auto& j) { j["tie_word_embeddings"] = true; });
  const absl::Status st = LoadStatus(dir);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("unexpected tensor 'lm_head.weight'"),
                                  HasSubstr("tie_word_embeddings is true")));
}

TEST(HfCheckpointErrors, VocabularyLargerThanTheEmbedding) {
  const std::string dir = CopyTiny("vocab");
  EditJson(dir + "/config.json", [](auto& j) { j["vocab_size"] = 600; });
  const absl::Status st = LoadStatus(dir);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("'model.embed_tokens.weight'"),
                                  HasSubstr("expected shape [600, 96], got [512, 96]")));
}

TEST(HfCheckpointErrors, ConfigKeysThatChangeTheMathOrTheFamily) {
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    std::string want;
  };
  const std::vector<Case> cases = {
      {[](auto& j) { j["architectures"] = {"MambaForCausalLM"}; },
       "'architectures' names 'MambaForCausalLM', which is not supported (supported: "},
      {[](auto& j) { j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; },
       "'rope_scaling.rope_type' 'yarn' is not supported"},
      {[](auto& j) { j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}}; },
       "'rope_scaling.low_freq_factor' is missing"},
      {[](auto& j) { j["hidden_act"] = "gelu"; }, "'hidden_act' = \"gelu\" is not supported"},
      {[](auto& j) { j["num_key_value_heads"] = 3; }, "'num_key_value_heads' = 3 does not divide"},
      {[](auto& j) { j.erase("hidden_size"); }, "'hidden_size' is missing"},
      {[](auto& j) { j["eos_token_id"] = 9999; }, "'eos_token_id' holds 9999"},
      {[](auto& j) { j["layer_types"] = {"full_attention", "sliding_attention", "x"}; },
       "'layer_types' holds \"sliding_attention\""},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string dir = CopyTiny("config_" + std::to_string(i));
    EditJson(dir + "/config.json", cases[i].edit);
    const absl::Status st = LoadStatus(dir);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << i << ": " << st;
    EXPECT_THAT(st.message(), AllOf(HasSubstr(dir + "/config.json"), HasSubstr(cases[i].want)))
        << i;
  }
}

// Unknown keys are listed (the server logs them once), not refused; an F32 single-file copy of
// the BF16 shards loads, binds in place and runs as f32.
TEST(HfCheckpointErrors, UnknownKeysAreListedAndF32SingleFileLoads) {
  const std::string dir = SingleFileTiny(
      "f32_single", [](auto&) {}, [](auto& j) { j["some_new_key"] = 1; });
  auto m = Model::Load(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->ignored_config_keys(), std::vector<std::string>{"some_new_key"});
  EXPECT_EQ((*m)->config().torch_dtype, TorchDtype::kFloat32);
}

// RMSNorm with (1 + w) (ModelConfig::norm_unit_offset, Gemma's form): the binder folds the 1 into
// a copy of the weight, widened from BF16; the mapping itself is never written.
TEST(HfTensors, NormUnitOffsetFoldsOneIntoACopy) {
  auto files = WeightFiles::Open(kTiny + "/");
  ASSERT_TRUE(files.ok()) << files.status();
  const TensorView* raw = (*files)->Find("model.norm.weight").tensor;
  ASSERT_NE(raw, nullptr);
  ModelConfig c;
  c.norm_unit_offset = true;
  const float* norm = nullptr;
  TensorStore store;
  const std::vector<HfTensor> table = {
      {HfTensor::Kind::kNorm, {"model.norm.weight"}, {{96}}, &norm}};
  // Only this tensor is in the table: every other one is "ignored" by its suffix here.
  const absl::Status st =
      BindHfTensors(table, {"weight", "bias"}, "Test", **files, &c, &store);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_NE(norm, nullptr);
  EXPECT_NE(static_cast<const void*>(norm), static_cast<const void*>(raw->data));
  for (int i = 0; i < 96; ++i) EXPECT_EQ(norm[i], FromBf16Bits(raw->bf16()[i]) + 1.f) << i;
}

}  // namespace
}  // namespace flatstate::testing
