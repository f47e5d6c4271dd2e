// flatstate engine benchmarks (Google Benchmark; not part of ctest).
//
//   build/bench/flatstate-bench [--benchmark_filter=...] [--benchmark_min_time=...]
//
// Models: the shipped models/shakespeare-linear-elu and models/shakespeare-softmax, and synthetic
// GPT-2-small-shaped models (12 layers, d_model 768, 12 heads, MLP 3072, random weights) written
// on first use to $FLATSTATE_BENCH_DIR (default /tmp/flatstate-bench; never committed).
//
// Families (compare ratios inside one run; see docs/benchmarks.md for the targets):
//   Decode/<model>/batch:B      one decode step for B sessions (items = tokens)
//   DecodeAtContext/<model>/ctx:N   batch-1 decode step with N tokens of context
//   Prefill/<model>/chunked|token_by_token/len:4096   prefill tokens/s
//   MemoryReadBandwidth         single-thread streaming read of 1 GiB (bytes/s)
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/runtime/engine.h"
#include "tests/util/model_writer.h"

namespace flatstate {
namespace {

namespace fs = std::filesystem;

std::string SourceDir() { return FLATSTATE_SOURCE_DIR; }

std::string BenchDir() {
  const char* d = std::getenv("FLATSTATE_BENCH_DIR");
  return d ? d : "/tmp/flatstate-bench";
}

// Writes the GPT-2-small-shaped random model once.
std::string Gpt2Small(AttentionKind kind) {
  const std::string dir = BenchDir() + "/gpt2-small-" + std::string(AttentionKindName(kind));
  if (fs::exists(dir + "/model.safetensors")) return dir;
  fs::create_directories(dir);
  auto st = testing::WriteRandomModel(dir, testing::Gpt2SmallConfig(kind), 1234);
  if (!st.ok()) {
    std::fprintf(stderr, "cannot write %s: %s\n", dir.c_str(), std::string(st.status().message()).c_str());
    std::exit(1);
  }
  return dir;
}

struct Loaded {
  std::unique_ptr<Engine> engine;
};

Engine* GetEngine(const std::string& dir, int threads) {
  static std::map<std::string, std::unique_ptr<Engine>> cache;
  const std::string key = absl::StrCat(dir, "#", threads);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second.get();
  auto model = Model::Load(dir);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", std::string(model.status().message()).c_str());
    std::exit(1);
  }
  EngineOptions o;
  o.threads = threads;
  o.kv_blocks = 8192 + 64;  // 64k-token context on the softmax models, plus headroom
  // FLATSTATE_BENCH_DEVICE=cpu|cuda|auto (default cpu); see docs/gpu.md for the CUDA runs.
  const char* dev = std::getenv("FLATSTATE_BENCH_DEVICE");
  auto device = ParseDevice(dev != nullptr ? dev : "cpu");
  if (!device.ok()) {
    std::fprintf(stderr, "%s\n", std::string(device.status().message()).c_str());
    std::exit(1);
  }
  o.device = *device;
  auto e = Engine::Create(std::move(*model), o);
  if (!e.ok()) {
    std::fprintf(stderr, "%s\n", std::string(e.status().message()).c_str());
    std::exit(1);
  }
  return (cache[key] = std::move(*e)).get();
}

std::vector<int32_t> Tokens(size_t n) {
  std::vector<int32_t> t(n);
  std::mt19937 g(5);
  for (auto& v : t) v = static_cast<int32_t>(g() % 256);
  return t;
}

// Puts `s` at context `ctx` cheaply: the decode cost depends on the context length, not on the
// values, so softmax gets its KV blocks reserved and filled with random rows and linear kinds just
// get their position moved (their state has a fixed size by construction).
void FastForward(Engine* e, SessionState* s, int64_t ctx) {
  if (e->kv_pool() != nullptr) {
    if (!e->kv_pool()->Reserve(&s->kv_blocks, ctx + 1).ok()) std::exit(2);
    std::mt19937 g(1);
    std::uniform_real_distribution<float> u(-1, 1);
    for (int32_t b : s->kv_blocks) {
      for (int l = 0; l < e->config().num_hidden_layers; ++l) {
        for (int slot = 0; slot < e->kv_pool()->block_size(); ++slot) {
          float* k = e->kv_pool()->K(b, l, slot);
          float* v = e->kv_pool()->V(b, l, slot);
          for (int d = 0; d < e->config().hidden_size; ++d) k[d] = u(g), v[d] = u(g);
        }
      }
    }
  }
  s->position = ctx;
}

void Decode(benchmark::State& state, std::string dir, int threads) {
  Engine* e = GetEngine(dir, threads);
  const int batch = static_cast<int>(state.range(0));
  std::vector<SessionState> sessions;
  for (int i = 0; i < batch; ++i) {
    sessions.push_back(e->NewSession(SamplingParams{0.8f, 0, 1.f, uint64_t(i)}));
    FastForward(e, &sessions.back(), 64);
    sessions.back().pending = {65};
  }
  std::vector<StepRequest> reqs;
  for (auto& s : sessions) reqs.push_back({&s, 1, true});
  std::vector<StepResult> res;
  for (auto _ : state) {
    if (!e->Step(reqs, &res).ok()) state.SkipWithError("step failed");
  }
  state.SetItemsProcessed(state.iterations() * batch);
  state.counters["weight_bytes_per_s"] = benchmark::Counter(
      static_cast<double>(e->model().weight_bytes()) * state.iterations(),
      benchmark::Counter::kIsRate);
  for (auto& s : sessions) e->ReleaseSession(&s);
}

void DecodeAtContext(benchmark::State& state, std::string dir, int threads) {
  Engine* e = GetEngine(dir, threads);
  SessionState s = e->NewSession({});
  const int64_t ctx = state.range(0);
  FastForward(e, &s, ctx);
  s.pending = {65};
  StepRequest req{&s, 1, true};
  std::vector<StepResult> res;
  for (auto _ : state) {
    // Keep the context at ctx: rewind after each step (the KV rows stay reserved).
    s.position = ctx;
    if (!e->Step(std::span<const StepRequest>(&req, 1), &res).ok()) state.SkipWithError("step");
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["session_bytes"] = static_cast<double>(e->SessionBytes(s));
  e->ReleaseSession(&s);
}

void Prefill(benchmark::State& state, std::string dir, int threads, bool chunked) {
  Engine* e = GetEngine(dir, threads);
  const auto prompt = Tokens(static_cast<size_t>(state.range(0)));
  std::vector<StepResult> res;
  for (auto _ : state) {
    SessionState s = e->NewSession({});
    if (!e->Append(&s, prompt).ok()) state.SkipWithError("append");
    StepRequest req{&s, chunked ? (1 << 30) : 1, false};
    while (!s.pending.empty()) {
      if (!e->Step(std::span<const StepRequest>(&req, 1), &res).ok()) {
        state.SkipWithError("step");
        break;
      }
      if (!chunked && s.pending.size() > 1) {
        // Token by token: one token per step (PlanTokens would round up to the chunk grid).
      }
    }
    e->ReleaseSession(&s);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

// Token-by-token prefill: each step runs exactly one token (a decode step per prompt token).
void PrefillTokenByToken(benchmark::State& state, std::string dir, int threads) {
  Engine* e = GetEngine(dir, threads);
  const auto prompt = Tokens(static_cast<size_t>(state.range(0)));
  std::vector<StepResult> res;
  for (auto _ : state) {
    SessionState s = e->NewSession({});
    for (int32_t t : prompt) {
      s.pending.assign(1, t);
      StepRequest req{&s, 1, false};
      if (!e->Step(std::span<const StepRequest>(&req, 1), &res).ok()) {
        state.SkipWithError("step");
        break;
      }
    }
    e->ReleaseSession(&s);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

void MemoryReadBandwidth(benchmark::State& state) {
  const size_t n = size_t{1} << 28;  // 1 GiB of floats
  std::vector<float> buf(n, 1.f);
  for (auto _ : state) {
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    for (size_t i = 0; i < n; i += 8) {
      s0 += buf[i], s1 += buf[i + 1], s2 += buf[i + 2], s3 += buf[i + 3];
      s4 += buf[i + 4], s5 += buf[i + 5], s6 += buf[i + 6], s7 += buf[i + 7];
    }
    benchmark::DoNotOptimize(s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n * sizeof(float)));
}

void RegisterAll() {
  const std::string lin = SourceDir() + "/models/shakespeare-linear-elu";
  const std::string soft = SourceDir() + "/models/shakespeare-softmax";
  benchmark::RegisterBenchmark("MemoryReadBandwidth", MemoryReadBandwidth)
      ->Unit(benchmark::kMillisecond)->MinTime(2);
  std::vector<std::pair<std::string, std::string>> models;
  for (const auto& [name, dir] : {std::pair<std::string, std::string>{"shakespeare-linear-elu", lin},
                                  {"shakespeare-softmax", soft}}) {
    if (fs::exists(dir + "/config.json")) models.emplace_back(name, dir);
  }
  // FLATSTATE_BENCH_MODELS=dir1,dir2 adds more model folders (named by their base name).
  if (const char* extra = std::getenv("FLATSTATE_BENCH_MODELS")) {
    for (std::string d : std::vector<std::string>(absl::StrSplit(extra, ',', absl::SkipEmpty()))) {
      models.emplace_back(fs::path(d).filename().string(), d);
    }
  }
  models.emplace_back("gpt2-small-linear_elu", Gpt2Small(AttentionKind::kLinearElu));
  models.emplace_back("gpt2-small-softmax", Gpt2Small(AttentionKind::kSoftmax));
  for (int threads : {1, 2}) {
    for (const auto& [name, dir] : models) {
      const std::string tag = absl::StrCat(name, "/threads:", threads);
      benchmark::RegisterBenchmark(absl::StrCat("Decode/", tag).c_str(), Decode, dir, threads)
          ->ArgName("batch")->Arg(1)->Arg(8)->Arg(32)->Unit(benchmark::kMillisecond)->UseRealTime();
    }
  }
  for (const auto& [name, dir] : models) {
    if (name.rfind("gpt2", 0) == 0) continue;  // context sweep on the shipped models
    benchmark::RegisterBenchmark(absl::StrCat("DecodeAtContext/", name).c_str(), DecodeAtContext,
                                 dir, 2)
        ->ArgName("ctx")->Arg(1024)->Arg(16384)->Arg(65536)->Unit(benchmark::kMicrosecond)->UseRealTime();
  }
  for (const auto& [name, dir] : models) {
    benchmark::RegisterBenchmark(absl::StrCat("Prefill/", name, "/chunked").c_str(), Prefill, dir,
                                 2, true)
        ->ArgName("len")->Arg(4096)->Unit(benchmark::kMillisecond)->Iterations(2)->UseRealTime();
    // Token-by-token prefill of 4k tokens on the GPT-2-small softmax shape takes minutes (each
    // step attends over the growing cache); the linear shapes carry the comparison.
    if (name == "gpt2-small-softmax") continue;
    benchmark::RegisterBenchmark(absl::StrCat("Prefill/", name, "/token_by_token").c_str(),
                                 PrefillTokenByToken, dir, 2)
        ->ArgName("len")->Arg(4096)->Unit(benchmark::kMillisecond)->Iterations(1)->UseRealTime();
  }
}

}  // namespace
}  // namespace flatstate

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  flatstate::RegisterAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
