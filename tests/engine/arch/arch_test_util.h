// Checks the Hugging Face architecture tests (tests/engine/arch/*_arch_test.cc) share, on a tiny
// golden folder written by a tools/hf_*.py writer with golden_reference.json (the float64
// reference) and golden_llamacpp.json (llama.cpp's greedy tokens) from tools/hf_llama_golden.py.
#ifndef FLATSTATE_TESTS_ENGINE_ARCH_ARCH_TEST_UTIL_H_
#define FLATSTATE_TESTS_ENGINE_ARCH_ARCH_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "engine/runtime/engine.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/runtime/engine_test_util.h"

namespace flatstate::testing {

inline nlohmann::json ReadJson(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return nlohmann::json::parse(f);
}

// The golden file's logit range (logit_max - logit_min), the unit of the logit tolerances.
inline double GoldenRange(const nlohmann::json& g) {
  return g["logit_max"].get<double>() - g["logit_min"].get<double>();
}

// Max |logit - reference| over the golden file's positions, for `logits` holding every prompt
// row (V floats each); a non-finite logit fails the test and counts as infinitely far.
inline double MaxDiffAtGoldenPositions(const std::vector<float>& logits, const nlohmann::json& g,
                                       int V) {
  const auto positions = g["positions"].get<std::vector<int32_t>>();
  const auto want = g["logits"].get<std::vector<std::vector<float>>>();
  double worst = 0;
  for (size_t i = 0; i < positions.size(); ++i) {
    for (int v = 0; v < V; ++v) {
      const double got = logits[static_cast<size_t>(positions[i]) * V + v];
      if (!std::isfinite(got)) {
        ADD_FAILURE() << "logit at position " << positions[i] << " token " << v << " is " << got;
        return std::numeric_limits<double>::infinity();
      }
      worst = std::max(worst, std::abs(got - want[i][v]));
    }
  }
  return worst;
}

// An engine on 2 threads whose prefill chunk is `chunk` (EngineOptions::chunk_size), with a
// 512-block KV pool for the hybrids' softmax layers.
inline std::unique_ptr<Engine> MakeChunkedEngine(const std::string& dir, int chunk,
                                                 WeightDtype dtype) {
  EngineOptions o;
  o.threads = 2;
  o.kv_blocks = 512;
  o.chunk_size = chunk;
  o.weight_dtype = dtype;
  return MakeEngineWith(dir, o);
}

// For each of `dtypes` (default f32 and the file's own bf16): the prompt's logits at the golden
// positions within 1e-3 of the reference's logit range (recorded as the property
// max_abs_logit_diff_<dtype>), then `after_prompt` (e.g. a state comparison) on the session that
// ran the prompt, and 64 greedy tokens equal to the reference's and, with `llamacpp` (families
// llama.cpp runs), to llama.cpp's. `chunk`: the engine's prefill chunk.
inline void ExpectMatchesGolden(
    const std::string& dir, int chunk,
    const std::function<void(Engine*, SessionState*, WeightDtype)>& after_prompt = {},
    bool llamacpp = true,
    std::initializer_list<WeightDtype> dtypes = {WeightDtype::kF32, WeightDtype::kBf16}) {
  const nlohmann::json g = ReadJson(dir + "/golden_reference.json");
  const auto prompt = g["prompt"].get<std::vector<int32_t>>();
  const double range = GoldenRange(g);
  const nlohmann::json peer =
      llamacpp ? ReadJson(dir + "/golden_llamacpp.json") : nlohmann::json::object();
  for (WeightDtype dtype : dtypes) {
    auto e = MakeChunkedEngine(dir, chunk, dtype);
    ASSERT_NE(e, nullptr);
    const int V = e->config().vocab_size;
    SessionState s = e->NewSession({});
    auto logits = e->Score(&s, prompt);
    ASSERT_TRUE(logits.ok()) << logits.status();
    const double worst = MaxDiffAtGoldenPositions(*logits, g, V);
    EXPECT_LE(worst, 1e-3 * range) << WeightDtypeName(dtype);
    ::testing::Test::RecordProperty(std::string("max_abs_logit_diff_") + WeightDtypeName(dtype),
                                    std::to_string(worst));
    if (after_prompt) after_prompt(e.get(), &s, dtype);
    e->ReleaseSession(&s);
    SessionState gen = e->NewSession({});
    const std::vector<int32_t> greedy = GenerateAlone(e.get(), &gen, prompt, 64);
    EXPECT_EQ(greedy, g["greedy"].get<std::vector<int32_t>>()) << WeightDtypeName(dtype);
    if (llamacpp) {
      EXPECT_EQ(greedy, peer["greedy"].get<std::vector<int32_t>>()) << "llama.cpp";
    }
    e->ReleaseSession(&gen);
  }
}

// Token by token (the recurrent form) and one prefill (chunks of `chunk`) give the same greedy
// continuation; a checkpoint taken mid-generation restores and continues exactly; with
// `flat_state` (no softmax layer) a checkpoint after 2000 tokens is as large as after 100; a
// session's sampled tokens do not depend on the batch.
inline void ExpectFormsCheckpointsAndBatchInvariance(const std::string& dir, int chunk,
                                                     bool flat_state) {
  auto e = MakeChunkedEngine(dir, chunk, WeightDtype::kF32);
  ASSERT_NE(e, nullptr);
  const auto prompt =
      ReadJson(dir + "/golden_reference.json")["prompt"].get<std::vector<int32_t>>();
  SessionState one = e->NewSession({});
  const std::vector<int32_t> want = GenerateAlone(e.get(), &one, prompt, 16);
  SessionState steps = e->NewSession({});
  for (size_t i = 0; i + 1 < prompt.size(); ++i) {
    ASSERT_TRUE(e->Score(&steps, std::span<const int32_t>(&prompt[i], 1)).ok());
  }
  EXPECT_EQ(GenerateAlone(e.get(), &steps, {prompt.back()}, 16), want);

  SessionState s = e->NewSession({.temperature = 0.8f, .top_k = 0, .top_p = 0.95f, .seed = 5});
  GenerateAlone(e.get(), &s, prompt, 20);
  auto blob = e->Checkpoint(s);
  ASSERT_TRUE(blob.ok()) << blob.status();
  const std::vector<int32_t> rest = GenerateAlone(e.get(), &s, {}, 20);
  auto restored = e->Restore(*blob);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(GenerateAlone(e.get(), &*restored, {}, 20), rest);
  if (flat_state) {
    GenerateAlone(e.get(), &s, {}, 1900);
    EXPECT_GE(s.context_tokens(), 2000);
    auto late = e->Checkpoint(s);
    ASSERT_TRUE(late.ok()) << late.status();
    EXPECT_EQ(late->size(), blob->size());
  }

  SessionState alone = e->NewSession({.temperature = 1.f, .top_k = 0, .top_p = 1.f, .seed = 3});
  const std::vector<int32_t> solo = GenerateAlone(e.get(), &alone, prompt, 24);
  SessionState crowd = e->NewSession({.temperature = 1.f, .top_k = 0, .top_p = 1.f, .seed = 3});
  ASSERT_TRUE(e->Append(&crowd, prompt).ok());
  EXPECT_EQ(GenerateInCrowd(e.get(), &crowd, 24, 3), solo);
}

// A copy of `dir`'s files in a fresh temp folder `name`, with the first `from` in config.json's
// text replaced by `to` (text, so Python's Infinity literal survives).
inline std::string EditedCopy(const std::string& dir, const std::string& name,
                              const std::string& from, const std::string& to) {
  namespace fs = std::filesystem;
  const std::string out = TempDir() + "/" + name;
  fs::remove_all(out);
  fs::create_directories(out);
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file()) fs::copy_file(e.path(), out + "/" + e.path().filename().string());
  }
  std::string text = ReadFile(out + "/config.json");
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  EXPECT_TRUE(WriteFile(out + "/config.json", text));
  return out;
}

}  // namespace flatstate::testing

#endif  // FLATSTATE_TESTS_ENGINE_ARCH_ARCH_TEST_UTIL_H_
