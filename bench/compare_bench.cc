// The flatstate side of the llama.cpp comparison (part of flatstate-bench, CPU only; see
// bench/compare_llamacpp.sh and docs/benchmarks.md "llama.cpp side by side"):
//
//   Prefill/<model>/<type>/threads:T/len:N   one N-token prompt (N = 512, 4096) prefilled in
//       chunked steps into a fresh session; items = prompt tokens.
//   DecodeAtContext/<model>/<type>/threads:T/ctx:N   one batch-1 decode step with N = 0, 1024,
//       16384 tokens of context; items = tokens. Counter context_bytes = what the step reads
//       per token besides the weights: softmax the K and V rows of the context in the cache's
//       element type (FLATSTATE_BENCH_KV_DTYPE, default f32); linear kinds the recurrent state
//       (the same at every N).
//
// <model> is a GPT-2-small-shaped model (gpt2-small-linear_elu, gpt2-small-softmax), <type> the
// layers' weight type (EngineOptions::weight_dtype). Every row has counter params = the model's
// parameters (for the per-parameter ratios; llama.cpp's llama-bench reports its own). The batch-1
// decode rows at 1 and 2 threads are engine_bench.cc's Decode/<model>/<type>/threads:T/batch:1.
//
// Only one engine is held at a time (an engine is 100-340 MB of packed weights, plus 1.2 GB of
// K/V once a softmax session sits at a 16k context): the cases of one (model, type, threads) are
// registered together, so each engine is built once per run unless the cases are interleaved.
#include "bench/compare_bench.h"

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/runtime/engine.h"

namespace flatstate {
namespace {

constexpr int64_t kMaxDepth = 16384;
constexpr int64_t kPrefillLens[] = {512, 4096};
constexpr int64_t kDepths[] = {0, 1024, kMaxDepth};
// Softmax pool: the depth session's kMaxDepth + 1 tokens plus one 4096-token prompt.
constexpr int kKvBlocks = static_cast<int>((kMaxDepth + 1 + 4096) / 16 + 64);

[[noreturn]] void Die(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "%s: %s\n", what.c_str(), std::string(status.message()).c_str());
  std::exit(1);
}

// The engine for the current (model, type, threads, K/V type), and a session that sits at up to
// kMaxDepth tokens of context (for softmax with every K/V row filled; filled once per engine).
class Held {
 public:
  static Held& Get(const std::string& dir, WeightDtype dtype, int threads, KvDtype kv_dtype) {
    static Held held;
    const std::string key =
        absl::StrCat(dir, "#", WeightDtypeName(dtype), "#", threads, "#", KvDtypeName(kv_dtype));
    if (held.key_ != key) held.Load(key, dir, dtype, threads, kv_dtype);
    return held;
  }

  Engine* engine() { return engine_.get(); }
  double params() const { return static_cast<double>(engine_->model().weight_bytes()) / 4; }

  // The deep session moved to `ctx` (<= kMaxDepth) with one token pending.
  SessionState* AtContext(int64_t ctx) {
    if (!deep_ready_) Fill();
    deep_.position = ctx;
    deep_.pending = {65};
    return &deep_;
  }

 private:
  void Load(const std::string& key, const std::string& dir, WeightDtype dtype, int threads,
            KvDtype kv_dtype) {
    if (engine_ != nullptr && deep_ready_) engine_->ReleaseSession(&deep_);
    deep_ready_ = false;
    engine_.reset();  // free the old weights before loading the next ones
    key_.clear();
    auto model = Model::Load(dir);
    if (!model.ok()) Die(dir, model.status());
    EngineOptions o;
    o.threads = threads;
    o.kv_blocks = kKvBlocks;
    o.weight_dtype = dtype;
    o.kv_dtype = kv_dtype;
    auto e = Engine::Create(std::move(*model), o);
    if (!e.ok()) Die(dir, e.status());
    engine_ = std::move(*e);
    key_ = key;
  }

  // The decode cost depends on the context length, not on the values: softmax gets its K/V rows
  // filled with cheap pseudo-random values in [-1, 1); linear kinds only move their position
  // (their state has a fixed size).
  void Fill() {
    deep_ = engine_->NewSession(SamplingParams{0.f, 0, 1.f, 1});
    KvBlockPool* pool = engine_->kv_pool();
    if (pool != nullptr) {
      if (auto st = pool->Reserve(&deep_.kv_blocks, kMaxDepth + 1); !st.ok()) Die("KV", st);
      const ModelConfig& c = engine_->config();
      uint32_t x = 2463534242u;
      std::vector<float> row(c.hidden_size);
      for (int32_t b : deep_.kv_blocks) {
        for (int l = 0; l < c.num_hidden_layers; ++l) {
          for (int slot = 0; slot < pool->block_size(); ++slot) {
            for (int kv = 0; kv < 2; ++kv) {
              for (int d = 0; d < c.hidden_size; ++d) {
                x ^= x << 13, x ^= x >> 17, x ^= x << 5;
                row[d] = static_cast<float>(x >> 8) * (2.f / 16777216.f) - 1.f;
              }
              pool->WriteRow(b, l, kv, slot, row.data());  // in the pool's KvDtype
            }
          }
        }
      }
    }
    deep_ready_ = true;
  }

  std::string key_;
  std::unique_ptr<Engine> engine_;
  SessionState deep_;
  bool deep_ready_ = false;
};

std::vector<int32_t> PromptTokens(int64_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  uint32_t x = 5;
  for (auto& v : t) {
    x = x * 1664525u + 1013904223u;
    v = static_cast<int32_t>(x >> 24);  // 0..255: the byte vocabulary
  }
  return t;
}

void PrefillCase(benchmark::State& state, std::string dir, WeightDtype dtype, int threads,
                 KvDtype kv_dtype) {
  Held& held = Held::Get(dir, dtype, threads, kv_dtype);
  Engine* e = held.engine();
  const std::vector<int32_t> prompt = PromptTokens(state.range(0));
  std::vector<StepResult> res;
  for (auto _ : state) {
    SessionState s = e->NewSession({});
    if (!e->Append(&s, prompt).ok()) {
      state.SkipWithError("append failed");
      break;
    }
    StepRequest req{&s, 1 << 30, false};
    while (!s.pending.empty()) {
      if (!e->Step(std::span<const StepRequest>(&req, 1), &res).ok()) {
        state.SkipWithError("step failed");
        break;
      }
    }
    e->ReleaseSession(&s);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.counters["params"] = held.params();
}

void DecodeAtDepthCase(benchmark::State& state, std::string dir, WeightDtype dtype, int threads,
                       KvDtype kv_dtype) {
  Held& held = Held::Get(dir, dtype, threads, kv_dtype);
  Engine* e = held.engine();
  const int64_t ctx = state.range(0);
  SessionState* s = held.AtContext(ctx);
  StepRequest req{s, 1, true};
  std::vector<StepResult> res;
  for (auto _ : state) {
    s->position = ctx;  // keep the context at ctx (the K/V rows stay reserved)
    if (!e->Step(std::span<const StepRequest>(&req, 1), &res).ok()) {
      state.SkipWithError("step failed");
      break;
    }
  }
  const ModelConfig& c = e->config();
  state.SetItemsProcessed(state.iterations());
  state.counters["params"] = held.params();
  state.counters["context_bytes"] =
      c.is_linear() ? static_cast<double>(c.state_bytes())
                    : static_cast<double>(e->kv_bytes_per_token()) * (ctx + 1.0);
}

}  // namespace

void RegisterCompareBenchmarks(const std::vector<std::pair<std::string, std::string>>& models,
                               const std::vector<WeightDtype>& dtypes, KvDtype kv_dtype) {
  for (const auto& [name, dir] : models) {
    for (WeightDtype dtype : dtypes) {
      for (int threads : {1, 2}) {
        const std::string tag =
            absl::StrCat(name, "/", WeightDtypeName(dtype), "/threads:", threads);
        auto* p = benchmark::RegisterBenchmark(absl::StrCat("Prefill/", tag).c_str(), PrefillCase,
                                               dir, dtype, threads, kv_dtype);
        p->ArgName("len")->Unit(benchmark::kMillisecond)->UseRealTime();
        for (int64_t len : kPrefillLens) p->Arg(len);
        auto* d = benchmark::RegisterBenchmark(absl::StrCat("DecodeAtContext/", tag).c_str(),
                                               DecodeAtDepthCase, dir, dtype, threads, kv_dtype);
        d->ArgName("ctx")->Unit(benchmark::kMillisecond)->UseRealTime();
        for (int64_t ctx : kDepths) d->Arg(ctx);
      }
    }
  }
}

}  // namespace flatstate
