// Every Hugging Face architecture's golden folder (tests/data/hf_*, written by the tools/hf_*.py
// writers with golden_reference.json from the float64 reference) on every Device: the logits at
// the golden positions within tolerance of the reference's, its 64 greedy tokens, chunked prefill
// vs token by token, a checkpoint taken on the device that continues identically on the CPU, and
// a batch-invariant engine whose sampled tokens and state do not depend on the crowd, and (CPU)
// steps split among the threads with each session's bits alone.
//
// Tolerances (of the reference's logit range): f32 weights 1e-3 everywhere (measured on an H200,
// 2026-11-26, docs/gpu-runs/2026-11-26-h200-1: at most 4e-5 absolute, every folder, and 64/64
// greedy tokens). The file's bf16 weights: 1e-3 on the CPU, whose bf16 GEMMs keep f32
// activations (the same logits as f32); 5e-2 on CUDA, whose bf16 GEMMs round the activations to
// bf16 too (docs/gpu.md "Weight types"): measured 0.06 to 2.0 absolute, 0.2 % to 3.8 % of the
// range (Qwen3.5's tiny model, init gain 1.5, the most), so greedy tokens there are not asserted
// (where a top-2 margin is under that error they flip: hf_delta_net_variant_tiny's first margin
// is 0.093 against an error of 0.69) but recorded as the property greedy_prefix_equal_bf16.
// The CPU instances repeat what tests/engine/arch/*_arch_test.cc check, so that a CUDA failure
// always has its CPU twin beside it; the cuda instances GTEST_SKIP with CheckDevice's reason when
// no GPU is visible. Each test records its worst difference as a property.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "engine/runtime/batch_split.h"
#include "engine/runtime/engine.h"
#include "gtest/gtest.h"
#include "tests/engine/arch/arch_test_util.h"
#include "tests/engine/runtime/engine_test_util.h"

namespace flatstate::testing {
namespace {

namespace fs = std::filesystem;

// Every golden folder; HfFoldersTest.EveryGoldenFolderIsListed keeps this complete.
const std::vector<std::string>& HfFolders() {
  static const std::vector<std::string> kFolders = {"hf_llama_tiny",
                                                    "hf_qwen2_tiny",
                                                    "hf_qwen3_tiny",
                                                    "hf_qwen35_tiny",
                                                    "hf_mamba2_tiny",
                                                    "hf_rwkv7_tiny",
                                                    "hf_gla_tiny",
                                                    "hf_gla_nogate_tiny",
                                                    "hf_gla_hybrid_tiny",
                                                    "hf_gated_deltanet_tiny",
                                                    "hf_gated_deltanet_hybrid_tiny",
                                                    "hf_delta_net_tiny",
                                                    "hf_delta_net_variant_tiny"};
  return kFolders;
}

std::string FolderPath(const std::string& name) {
  return std::string(FLATSTATE_SOURCE_DIR) + "/tests/data/" + name;
}

TEST(HfFoldersTest, EveryGoldenFolderIsListed) {
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(std::string(FLATSTATE_SOURCE_DIR) + "/tests/data")) {
    if (fs::exists(e.path() / "golden_reference.json")) {
      found.push_back(e.path().filename().string());
    }
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> listed = HfFolders();
  std::sort(listed.begin(), listed.end());
  EXPECT_EQ(found, listed);
}

std::unique_ptr<Engine> MakeOn(const std::string& dir, Device d, WeightDtype dtype,
                               bool batch_invariant = false) {
  EngineOptions o;
  o.device = d;
  o.threads = 2;
  o.kv_blocks = 512;
  o.weight_dtype = dtype;
  o.batch_invariant = batch_invariant;
  return MakeEngineWith(dir, o);
}

const SamplingParams kGreedy{0.f, 0, 1.f, 0};

using Param = std::tuple<Device, std::string>;

class EngineDeviceHf : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    SKIP_UNLESS_DEVICE(device());
    dir_ = FolderPath(std::get<1>(GetParam()));
    golden_ = ReadJson(dir_ + "/golden_reference.json");
    prompt_ = golden_["prompt"].get<std::vector<int32_t>>();
  }
  Device device() const { return std::get<0>(GetParam()); }
  std::string dir_;
  nlohmann::json golden_;
  std::vector<int32_t> prompt_;
};

TEST_P(EngineDeviceHf, LogitsAndGreedyMatchTheReference) {
  const double range = GoldenRange(golden_);
  for (WeightDtype dtype : {WeightDtype::kF32, WeightDtype::kBf16}) {
    SCOPED_TRACE(WeightDtypeName(dtype));
    auto e = MakeOn(dir_, device(), dtype);
    ASSERT_NE(e, nullptr);
    SessionState s = e->NewSession({});
    auto logits = e->Score(&s, prompt_);
    ASSERT_TRUE(logits.ok()) << logits.status();
    const double worst = MaxDiffAtGoldenPositions(*logits, golden_, e->config().vocab_size);
    const bool rounded_activations = dtype == WeightDtype::kBf16 && device() == Device::kCuda;
    EXPECT_LE(worst, (rounded_activations ? 5e-2 : 1e-3) * range);
    RecordProperty(std::string("max_abs_logit_diff_") + WeightDtypeName(dtype),
                   std::to_string(worst));
    RecordProperty("logit_range", std::to_string(range));
    e->ReleaseSession(&s);
    SessionState gen = e->NewSession(kGreedy);
    const std::vector<int32_t> greedy = GenerateAlone(e.get(), &gen, prompt_, 64);
    const auto golden_greedy = golden_["greedy"].get<std::vector<int32_t>>();
    size_t same = 0;
    while (same < greedy.size() && same < golden_greedy.size() &&
           greedy[same] == golden_greedy[same]) {
      ++same;
    }
    RecordProperty(std::string("greedy_prefix_equal_") + WeightDtypeName(dtype),
                   std::to_string(same));
    if (!rounded_activations) {
      EXPECT_EQ(greedy, golden_greedy);
    }
    e->ReleaseSession(&gen);
  }
}

// The upstream implementations' own greedy tokens (golden_upstream.json, written on a GPU by
// tools/gpu_upstream_parity.py: transformers' classes on the CPU in float64 and on CUDA in
// float32, fla's on CUDA in float32; docs/gpu-observed.md): flatstate's f32 greedy tokens equal
// each such run's. The bf16 runs are the upstream code's own rounding and are not compared. A
// folder without the file (upstream did not finish there) is skipped, saying so.
TEST_P(EngineDeviceHf, GreedyMatchesTheUpstreamImplementation) {
  const std::string path = dir_ + "/golden_upstream.json";
  if (!fs::exists(path)) {
    GTEST_SKIP() << path << " does not exist: the upstream run did not finish on this folder";
  }
  const nlohmann::json up = ReadJson(path);
  auto e = MakeOn(dir_, device(), WeightDtype::kF32);
  ASSERT_NE(e, nullptr);
  SessionState gen = e->NewSession(kGreedy);
  const std::vector<int32_t> greedy = GenerateAlone(e.get(), &gen, prompt_, 64);
  e->ReleaseSession(&gen);
  int compared = 0;
  for (const nlohmann::json& run : up["runs"]) {
    const std::string dtype = run["dtype"].get<std::string>();
    if (dtype != "float32" && dtype != "float64") continue;
    EXPECT_EQ(greedy, run["greedy"].get<std::vector<int32_t>>())
        << run["library"].get<std::string>() << " " << run["device"].get<std::string>() << " "
        << dtype;
    ++compared;
  }
  EXPECT_GE(compared, 1) << path << " has no float32 / float64 run";
  RecordProperty("upstream_runs_compared", std::to_string(compared));
}

TEST_P(EngineDeviceHf, ChunkedPrefillEqualsTokenByToken) {
  auto e = MakeOn(dir_, device(), WeightDtype::kF32);
  ASSERT_NE(e, nullptr);
  SessionState one = e->NewSession(kGreedy);
  const std::vector<int32_t> want = GenerateAlone(e.get(), &one, prompt_, 16);
  SessionState steps = e->NewSession(kGreedy);
  for (size_t i = 0; i + 1 < prompt_.size(); ++i) {
    ASSERT_TRUE(e->Score(&steps, std::span<const int32_t>(&prompt_[i], 1)).ok());
  }
  EXPECT_EQ(GenerateAlone(e.get(), &steps, {prompt_.back()}, 16), want);
  e->ReleaseSession(&one);
  e->ReleaseSession(&steps);
}

TEST_P(EngineDeviceHf, CheckpointContinuesIdenticallyOnTheCpu) {
  auto dev = MakeOn(dir_, device(), WeightDtype::kF32);
  auto cpu = MakeOn(dir_, Device::kCpu, WeightDtype::kF32);
  ASSERT_TRUE(dev && cpu);
  SessionState s = dev->NewSession(kGreedy);
  GenerateAlone(dev.get(), &s, prompt_, 8);
  auto blob = dev->Checkpoint(s);
  ASSERT_TRUE(blob.ok()) << blob.status();
  const std::vector<int32_t> on_device = GenerateAlone(dev.get(), &s, {}, 24);
  auto restored = cpu->Restore(*blob);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(GenerateAlone(cpu.get(), &*restored, {}, 24), on_device);
  dev->ReleaseSession(&s);
  cpu->ReleaseSession(&*restored);
}

TEST_P(EngineDeviceHf, BatchInvariantEngineSamplesTheSameInAnyCrowd) {
  auto e = MakeOn(dir_, device(), WeightDtype::kF32, /*batch_invariant=*/true);
  ASSERT_NE(e, nullptr);
  const SamplingParams sampled{1.f, 0, 1.f, 3};
  SessionState alone = e->NewSession(sampled);
  const std::vector<int32_t> solo = GenerateAlone(e.get(), &alone, prompt_, 24);
  SessionState crowd = e->NewSession(sampled);
  ASSERT_TRUE(e->Append(&crowd, prompt_).ok());
  EXPECT_EQ(GenerateInCrowd(e.get(), &crowd, 24, 3), solo);
  auto a = e->Checkpoint(alone);
  auto b = e->Checkpoint(crowd);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(*a == *b) << "the session's state differs after the same turns in a crowd";
  e->ReleaseSession(&alone);
  e->ReleaseSession(&crowd);
}

// A CPU step of 40 sessions on two threads runs as two shares of whole sessions, each thread the
// whole layer loop (engine/runtime/batch_split.h): every session's sampled tokens and state are
// bit for bit those it gets stepping alone (one row, the ops on the pool). The first step's
// prompts (1 to 5 tokens: prefill rows beside decode rows) and every later step (40 decode rows)
// are each split, which the test checks against SplitSequences itself.
class SplitStepHf : public ::testing::TestWithParam<std::string> {};

TEST_P(SplitStepHf, EachSessionGetsItsBitsAlone) {
  const std::string dir = FolderPath(GetParam());
  const auto prompt =
      ReadJson(dir + "/golden_reference.json")["prompt"].get<std::vector<int32_t>>();
  ASSERT_GE(prompt.size(), 8u);
  auto e = MakeOn(dir, Device::kCpu, WeightDtype::kF32, /*batch_invariant=*/true);
  ASSERT_NE(e, nullptr);
  constexpr int kSessions = 40, kTokens = 5;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int64_t> first_rows{0}, decode_rows{0};
  for (int i = 0; i < kSessions; ++i) {
    prompts.emplace_back(prompt.begin() + i % 3, prompt.begin() + i % 3 + 1 + i % 5);
    first_rows.push_back(first_rows.back() + static_cast<int64_t>(prompts.back().size()));
    decode_rows.push_back(decode_rows.back() + 1);
  }
  ASSERT_FALSE(SplitSequences(first_rows, 2).empty());
  ASSERT_FALSE(SplitSequences(decode_rows, 2).empty());
  std::vector<SessionState> crowd;
  for (int i = 0; i < kSessions; ++i) {
    crowd.push_back(e->NewSession(SamplingParams{1.f, 0, 1.f, uint64_t(100 + i)}));
    ASSERT_TRUE(e->Append(&crowd.back(), prompts[i]).ok());
  }
  std::vector<std::vector<int32_t>> got(kSessions);
  std::vector<StepResult> res;
  for (int step = 0; step < kTokens; ++step) {
    std::vector<StepRequest> reqs;
    for (SessionState& s : crowd) reqs.push_back(StepRequest{&s, 1 << 30, true});
    ASSERT_TRUE(e->Step(reqs, &res).ok());
    for (int i = 0; i < kSessions; ++i) {
      ASSERT_TRUE(res[i].sampled);
      got[i].push_back(res[i].token);
    }
  }
  for (int i = 0; i < kSessions; ++i) {
    SessionState alone = e->NewSession(SamplingParams{1.f, 0, 1.f, uint64_t(100 + i)});
    EXPECT_EQ(GenerateAlone(e.get(), &alone, prompts[i], kTokens), got[i]) << "session " << i;
    auto a = e->Checkpoint(alone);
    auto b = e->Checkpoint(crowd[i]);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_TRUE(*a == *b) << "session " << i << "'s state differs after a split step";
    e->ReleaseSession(&alone);
  }
  for (SessionState& s : crowd) e->ReleaseSession(&s);
}

INSTANTIATE_TEST_SUITE_P(Folders, SplitStepHf, ::testing::ValuesIn(HfFolders()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  return std::string(std::get<0>(info.param) == Device::kCpu ? "cpu_" : "cuda_") +
         std::get<1>(info.param);
}

INSTANTIATE_TEST_SUITE_P(DevicesAndFolders, EngineDeviceHf,
                         ::testing::Combine(::testing::Values(Device::kCpu, Device::kCuda),
                                            ::testing::ValuesIn(HfFolders())),
                         ParamName);

}  // namespace
}  // namespace flatstate::testing
