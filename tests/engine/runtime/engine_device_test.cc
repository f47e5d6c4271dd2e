// The engine's behaviour on every Device (cpu, cuda) and every attention kind, and CUDA vs CPU
// parity: logits within 1e-3 (fp32), identical greedy tokens, chunked prefill vs token by token,
// greedy batch invariance and token-budget invariance on the device, KV accounting, and
// checkpoints that move across devices (a session checkpointed on one device restores on the
// other and continues identically in greedy mode). Also the shipped models (models/*): device
// logits within 1e-3 of the CPU's and the same greedy continuation.
//
// The cuda instances GTEST_SKIP with CheckDevice's reason when no GPU is visible. On CUDA, cuBLAS
// may round a row differently for a different batch size, so batch invariance of the default
// engine there is checked on greedy tokens and logits to tolerance; with
// EngineOptions::batch_invariant it is checked bit for bit (the session's checkpoint after the
// same turns alone and in a crowd), as on the CPU (docs/gpu.md).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "engine/runtime/engine.h"
#include "gtest/gtest.h"
#include "tests/engine/runtime/engine_test_util.h"

namespace flatstate::testing {
namespace {

namespace fs = std::filesystem;

std::unique_ptr<Engine> MakeEngineOn(const std::string& dir, Device d, int threads = 2,
                                     int kv_blocks = 512, bool batch_invariant = false) {
  EngineOptions o;
  o.device = d;
  o.threads = threads;
  o.kv_blocks = kv_blocks;
  o.batch_invariant = batch_invariant;
  return MakeEngineWith(dir, o);
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double w = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    w = std::max(w, std::abs(double(a[i]) - b[i]));
  }
  return w;
}

const SamplingParams kGreedy{0.f, 0, 1.f, 0};

using Param = DeviceKind;

class EngineDevice : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    SKIP_UNLESS_DEVICE(device());
    dir_ = RandomModelDir(std::get<1>(GetParam()));
  }
  Device device() const { return std::get<0>(GetParam()); }
  std::string dir_;
};

TEST_P(EngineDevice, LogitsMatchCpuWithin1e3) {
  auto cpu = MakeEngineOn(dir_, Device::kCpu);
  auto dev = MakeEngineOn(dir_, device());
  ASSERT_TRUE(cpu && dev);
  for (size_t n : {1, 15, 16, 17, 70}) {
    const auto prompt = Tokens(n, static_cast<uint32_t>(n) + 3);
    SessionState a = cpu->NewSession({}), b = dev->NewSession({});
    auto la = cpu->Score(&a, prompt);
    auto lb = dev->Score(&b, prompt);
    ASSERT_TRUE(la.ok() && lb.ok()) << la.status() << " " << lb.status();
    EXPECT_LE(MaxAbsDiff(*lb, *la), 1e-3) << "prompt length " << n;
    ASSERT_TRUE(dev->SyncToHost(&b).ok());  // CUDA linear: the state lives in a device slot
    ASSERT_EQ(a.linear.size(), b.linear.size());
    for (size_t i = 0; i < a.linear.size(); ++i) {
      if (std::isinf(a.linear[i])) {
        ASSERT_EQ(a.linear[i], b.linear[i]) << i;
      } else {
        ASSERT_NEAR(b.linear[i], a.linear[i], 1e-3 * (1 + std::abs(a.linear[i]))) << i;
      }
    }
    cpu->ReleaseSession(&a);
    dev->ReleaseSession(&b);
  }
}

TEST_P(EngineDevice, GreedyTokensMatchCpu) {
  auto cpu = MakeEngineOn(dir_, Device::kCpu);
  auto dev = MakeEngineOn(dir_, device());
  ASSERT_TRUE(cpu && dev);
  SessionState a = cpu->NewSession(kGreedy), b = dev->NewSession(kGreedy);
  const auto prompt = Tokens(37, 1);
  EXPECT_EQ(GenerateAlone(dev.get(), &b, prompt, 48), GenerateAlone(cpu.get(), &a, prompt, 48));
  cpu->ReleaseSession(&a);
  dev->ReleaseSession(&b);
}

TEST_P(EngineDevice, ChunkedPrefillEqualsTokenByToken) {
  auto e = MakeEngineOn(dir_, device());
  ASSERT_TRUE(e);
  // CPU: 1e-5 (bit-exact GEMMs); CUDA: cuBLAS rounds differently for 1 row and n rows.
  const double tol = device() == Device::kCpu ? 1e-5 : 1e-4;
  for (size_t n : {15, 16, 17, 33, 70}) {
    const auto prompt = Tokens(n, static_cast<uint32_t>(n));
    SessionState a = e->NewSession({}), b = e->NewSession({});
    auto chunked = e->Score(&a, prompt);
    ASSERT_TRUE(chunked.ok()) << chunked.status();
    std::vector<float> single;
    for (int32_t t : prompt) {
      auto l = e->Score(&b, std::span<const int32_t>(&t, 1));
      ASSERT_TRUE(l.ok()) << l.status();
      single.insert(single.end(), l->begin(), l->end());
    }
    EXPECT_LE(MaxAbsDiff(*chunked, single), tol) << "prompt length " << n;
    e->ReleaseSession(&a);
    e->ReleaseSession(&b);
  }
}

TEST_P(EngineDevice, GreedyBatchAndBudgetInvariance) {
  auto e = MakeEngineOn(dir_, device());
  ASSERT_TRUE(e);
  const auto prompt = Tokens(37, 1);
  SessionState alone = e->NewSession(kGreedy);
  const auto expect = GenerateAlone(e.get(), &alone, prompt, 30);
  e->ReleaseSession(&alone);
  // Among 8 others (prefill and decode mixed, small budgets).
  SessionState s = e->NewSession(kGreedy);
  ASSERT_TRUE(e->Append(&s, prompt).ok());
  EXPECT_EQ(GenerateInCrowd(e.get(), &s, 30, 8), expect);
  e->ReleaseSession(&s);
  for (int64_t budget : {1, 16, 40}) {
    SessionState b = e->NewSession(kGreedy);
    EXPECT_EQ(GenerateAlone(e.get(), &b, prompt, 30, budget), expect) << "budget " << budget;
    e->ReleaseSession(&b);
  }
}

// With batch_invariant (the CPU always is), a seeded session's whole state after 30 tokens is the
// same bytes alone and among 8 others (prefill and decode mixed, small budgets): its checkpoint.
TEST_P(EngineDevice, BatchInvariantEngineKeepsASessionsBitsInAnyCrowd) {
  auto e = MakeEngineOn(dir_, device(), 2, 512, /*batch_invariant=*/true);
  ASSERT_TRUE(e);
  const SamplingParams seeded{0.9f, 40, 0.95f, 11};
  const auto prompt = Tokens(37, 1);
  SessionState alone = e->NewSession(seeded);
  const auto expect = GenerateAlone(e.get(), &alone, prompt, 30);
  SessionState s = e->NewSession(seeded);
  ASSERT_TRUE(e->Append(&s, prompt).ok());
  EXPECT_EQ(GenerateInCrowd(e.get(), &s, 30, 8), expect);
  auto a = e->Checkpoint(alone);
  auto b = e->Checkpoint(s);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << " " << b.status();
  EXPECT_TRUE(*a == *b) << "the state differs after the same tokens";
  e->ReleaseSession(&alone);
  e->ReleaseSession(&s);
}

TEST_P(EngineDevice, CheckpointMovesAcrossDevices) {
  auto dev = MakeEngineOn(dir_, device());
  auto cpu = MakeEngineOn(dir_, Device::kCpu, /*threads=*/1);
  ASSERT_TRUE(dev && cpu);
  SessionState s = dev->NewSession(kGreedy);
  ASSERT_EQ(GenerateAlone(dev.get(), &s, Tokens(30, 3), 12).size(), 12u);
  auto blob = dev->Checkpoint(s);
  ASSERT_TRUE(blob.ok()) << blob.status();
  const auto expect = GenerateAlone(dev.get(), &s, {}, 25);
  // Device -> CPU.
  auto on_cpu = cpu->Restore(*blob);
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.status();
  EXPECT_EQ(GenerateAlone(cpu.get(), &*on_cpu, {}, 25), expect);
  // CPU -> device (a fresh device engine).
  auto cpu_blob = cpu->Checkpoint(*on_cpu);
  ASSERT_TRUE(cpu_blob.ok()) << cpu_blob.status();
  const auto expect2 = GenerateAlone(cpu.get(), &*on_cpu, {}, 10);
  auto dev2 = MakeEngineOn(dir_, device());
  ASSERT_TRUE(dev2);
  auto on_dev = dev2->Restore(*cpu_blob);
  ASSERT_TRUE(on_dev.ok()) << on_dev.status();
  EXPECT_EQ(GenerateAlone(dev2.get(), &*on_dev, {}, 10), expect2);
  dev->ReleaseSession(&s);
  cpu->ReleaseSession(&*on_cpu);
  dev2->ReleaseSession(&*on_dev);
}

TEST_P(EngineDevice, StateBytesAndKvAccountingMatchCpu) {
  auto e = MakeEngineOn(dir_, device(), 2, /*kv_blocks=*/64);
  ASSERT_TRUE(e);
  SessionState s = e->NewSession({});
  ASSERT_TRUE(e->Score(&s, Tokens(100, 4)).ok());
  if (e->config().is_linear()) {
    EXPECT_EQ(e->SessionBytes(s), e->config().state_bytes());
    ASSERT_TRUE(e->SyncToHost(&s).ok());
    for (float v : s.linear) ASSERT_FALSE(std::isnan(v));
  } else {
    EXPECT_EQ(static_cast<int>(s.kv_blocks.size()), (100 + 15) / 16);
    EXPECT_EQ(e->kv_pool()->blocks_used(), (100 + 15) / 16);
  }
  e->ReleaseSession(&s);
  if (!e->config().is_linear()) {
    EXPECT_EQ(e->kv_pool()->blocks_used(), 0);
  }
}

// Linear states stay in a device slot between steps (CUDA): a copy taken before SyncToHost is
// refused rather than run from a stale state; after SyncToHost a copy continues bit for bit like
// the original; a released slot is reused. On the CPU the state is the host vector itself.
TEST_P(EngineDevice, ResidentStateCopiesAreGuardedAndSlotsReused) {
  auto e = MakeEngineOn(dir_, device());
  ASSERT_TRUE(e);
  if (!e->config().is_linear()) GTEST_SKIP() << "softmax keeps no recurrent state";
  const bool on_device = device() != Device::kCpu;
  SessionState s = e->NewSession({});
  ASSERT_TRUE(e->Score(&s, Tokens(20, 8)).ok());
  EXPECT_EQ(s.device.id >= 0, on_device);
  EXPECT_EQ(s.device.host_stale, on_device);
  EXPECT_EQ(e->DeviceStateBytes() >= e->config().state_bytes(), on_device);
  if (on_device) {
    SessionState stale = s;  // the newest state stayed in s's slot
    auto refused = e->Score(&stale, Tokens(1, 9));
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
    EXPECT_EQ(e->Checkpoint(stale).status().code(), absl::StatusCode::kFailedPrecondition);
  }
  ASSERT_TRUE(e->SyncToHost(&s).ok());
  EXPECT_FALSE(s.device.host_stale);
  SessionState copy = s;
  const auto next = Tokens(5, 10);
  auto from_original = e->Score(&s, next);
  auto from_copy = e->Score(&copy, next);
  ASSERT_TRUE(from_original.ok() && from_copy.ok()) << from_copy.status();
  EXPECT_EQ(*from_copy, *from_original);
  const int32_t slot = copy.device.id;
  e->ReleaseSession(&copy);
  EXPECT_EQ(copy.device.id, -1);
  SessionState fresh = e->NewSession({});
  ASSERT_TRUE(e->Score(&fresh, Tokens(3, 11)).ok());
  EXPECT_EQ(fresh.device.id, slot);  // -1 == -1 on the CPU
  e->ReleaseSession(&s);
  e->ReleaseSession(&fresh);
}

// The driver's view of the device's memory: nothing on the CPU (its memory is the process's);
// on CUDA the whole GPU, which holds at least this engine's weights and its state slot pages.
TEST_P(EngineDevice, DeviceMemoryIsReported) {
  auto e = MakeEngineOn(dir_, device());
  ASSERT_TRUE(e);
  SessionState s = e->NewSession({});
  ASSERT_TRUE(e->Score(&s, Tokens(10, 12)).ok());
  absl::StatusOr<DeviceMemoryInfo> mem = e->DeviceMemory();
  ASSERT_TRUE(mem.ok()) << mem.status();
  if (device() == Device::kCpu) {
    EXPECT_EQ(mem->used_bytes, 0u);
    EXPECT_EQ(mem->total_bytes, 0u);
  } else {
    EXPECT_GT(mem->total_bytes, 0u);
    EXPECT_LE(mem->used_bytes, mem->total_bytes);
    EXPECT_GE(mem->used_bytes, e->DeviceStateBytes() + e->model().weight_bytes());
  }
  e->ReleaseSession(&s);
}

INSTANTIATE_TEST_SUITE_P(DevicesAndKinds, EngineDevice,
                         ::testing::Combine(::testing::Values(Device::kCpu, Device::kCuda),
                                            ::testing::ValuesIn(AllKinds())),
                         DeviceKindName);

// Shipped models: the device against the CPU on a real prompt.
std::vector<std::string> ShippedModels() {
  std::vector<std::string> out;
  const fs::path models = fs::path(FLATSTATE_SOURCE_DIR) / "models";
  if (!fs::exists(models)) return out;
  for (const auto& e : fs::directory_iterator(models)) {
    if (fs::exists(e.path() / "model.safetensors")) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(ShippedModelsOnCuda, LogitsAndGreedyMatchCpu) {
  SKIP_UNLESS_DEVICE(Device::kCuda);
  const std::string text = "ROMEO:\nBut soft, what light through yonder window breaks?\n";
  const std::vector<int32_t> prompt(text.begin(), text.end());
  for (const std::string& dir : ShippedModels()) {
    SCOPED_TRACE(dir);
    auto cpu = MakeEngineOn(dir, Device::kCpu);
    auto dev = MakeEngineOn(dir, Device::kCuda);
    ASSERT_TRUE(cpu && dev);
    SessionState a = cpu->NewSession(kGreedy), b = dev->NewSession(kGreedy);
    auto la = cpu->Score(&a, prompt);
    auto lb = dev->Score(&b, prompt);
    ASSERT_TRUE(la.ok() && lb.ok());
    EXPECT_LE(MaxAbsDiff(*lb, *la), 1e-3);
    cpu->ReleaseSession(&a);
    dev->ReleaseSession(&b);
    SessionState c = cpu->NewSession(kGreedy), d = dev->NewSession(kGreedy);
    EXPECT_EQ(GenerateAlone(dev.get(), &d, prompt, 64), GenerateAlone(cpu.get(), &c, prompt, 64));
    cpu->ReleaseSession(&c);
    dev->ReleaseSession(&d);
  }
}

}  // namespace
}  // namespace flatstate::testing
