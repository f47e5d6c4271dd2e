// The flatstate side of the llama.cpp comparison (part of flatstate-bench, CPU only; see
// bench/compare_llamacpp.sh and docs/benchmarks.md "llama.cpp side by side"):
//
//   Prefill/<model>/<type>/threads:T/len:N   one N-token prompt prefilled in chunked steps into a
//       fresh session, after two untimed prefills (llama-bench's warm-up); items = prompt tokens.
//   Decode/<model>/<type>/threads:T/batch:1   one greedy batch-1 decode step at a 64-token
//       context (the same-checkpoint rows only: the GPT-2-small models' batch-1 decode rows are
//       engine_bench.cc's Decode/<model>/<type>/threads:T/batch:1); items = tokens.
//   DecodeAtContext/<model>/<type>/threads:T/ctx:N   one greedy batch-1 decode step with N tokens
//       of context; items = tokens. Counter context_bytes = what the step reads per token besides
//       the weights: softmax the K and V rows of the context in the cache's element type
//       (FLATSTATE_BENCH_KV_DTYPE, default f32); linear kinds the recurrent state (the same at
//       every N).
// FLATSTATE_BENCH_HEAD_DTYPE: the output head's type (EngineOptions::head_dtype): "same" = the
// row's weight type (what llama.cpp's F32 / BF16 / Q8_0 files do with the head), or a type name.
//
// Two row sets (CompareRows): the GPT-2-small-shaped models (gpt2-small-linear_elu,
// gpt2-small-softmax; prefill 512 and 4096, depth 0 / 1k / 16k at 1 and 2 threads), and model
// folders that llama.cpp runs too, converted from the same Hugging Face checkpoint
// (FLATSTATE_BENCH_COMPARE_MODELS; prefill 512 or FLATSTATE_BENCH_COMPARE_PREFILL's lengths,
// decode at 1 and 2 threads, depth 0 and
// FLATSTATE_BENCH_COMPARE_DEPTHS at 2 threads). <type> is the layers' weight type
// (EngineOptions::weight_dtype). Every row has counter params = the model's parameters, counted
// as llama.cpp's llama-bench counts them (every tensor's elements; for the same checkpoint the
// per-parameter ratio is then 1).
//
// Only one engine is held at a time (an engine is 100 MB to a few GB of packed weights, plus up to
// 1.2 GB of K/V once a softmax session sits at a 16k context): the cases of one (model, type,
// threads) are registered together, so each engine is built once per run unless the cases are
// interleaved. The deep session's K/V rows are filled as far as the deepest case so far needs.
#include "bench/compare_bench.h"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_engines.h"
#include "engine/runtime/engine.h"

namespace flatstate {
namespace {

constexpr int64_t kDecodeCtx = 64;  // the context of the Decode rows (as engine_bench.cc's)

[[noreturn]] void Die(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "%s: %s\n", what.c_str(), std::string(status.message()).c_str());
  std::exit(1);
}

// What a case needs its engine to be: the model folder, weight type, threads, K/V type, and how
// many K/V blocks its pool has (the deepest context plus one longest prompt).
struct EngineSpec {
  std::string dir;
  WeightDtype dtype;
  int threads;
  KvDtype kv_dtype;
  int kv_blocks;
};

// Parameters as llama.cpp counts them: every tensor's elements. flatstate's own format here is
// the f32 GPT-2-small files (4 bytes an element); Hugging Face folders are counted from the
// shapes (their files may be bf16, or mix types).
double Params(const Engine& e) {
  const ModelConfig& c = e.config();
  if (c.architecture == "flatstate") return static_cast<double>(e.model().weight_bytes()) / 4;
  const ModelWeights& w = e.model().weights();
  const double d = c.hidden_size;
  double p = static_cast<double>(c.vocab_size) * d;  // the embedding
  if (w.lm_head != nullptr && w.lm_head != w.embed) p += static_cast<double>(c.vocab_size) * d;
  if (w.norm != nullptr) p += d;
  for (const LayerWeights& l : w.layers) {
    for (const GemmTensor* g : {&l.wqkv, &l.wo, &l.w1, &l.w2}) {
      p += static_cast<double>(g->n) * static_cast<double>(g->k);
    }
    if (l.attn_norm != nullptr) p += d;
    if (l.mlp_norm != nullptr) p += d;
    if (l.bqkv != nullptr) p += static_cast<double>(l.wqkv.n);
    if (l.bo != nullptr) p += d;
    if (l.b1 != nullptr) p += static_cast<double>(l.w1.n);
    if (l.b2 != nullptr) p += d;
    if (l.q_norm != nullptr) p += c.head_dim;
    if (l.k_norm != nullptr) p += c.head_dim;
  }
  return p;
}

// The engine for the current EngineSpec, and a session that sits at a context of up to the
// deepest case's tokens (for softmax with every K/V row filled; rows are filled once per engine,
// as far as a case has needed).
class Held {
 public:
  static Held& Get(const EngineSpec& spec) {
    static Held held;
    const std::string key =
        absl::StrCat(spec.dir, "#", WeightDtypeName(spec.dtype), "#", spec.threads, "#",
                     KvDtypeName(spec.kv_dtype), "#", spec.kv_blocks);
    if (held.key_ != key) held.Load(key, spec);
    return held;
  }

  Engine* engine() { return engine_.get(); }
  double params() const { return params_; }
  // A token id every model has (65, "A" in the byte vocabularies).
  int32_t token() const { return 65 % engine_->config().vocab_size; }

  // The deep session moved to `ctx` with one token pending.
  SessionState* AtContext(int64_t ctx) {
    if (!deep_ready_) {
      deep_ = engine_->NewSession(SamplingParams{0.f, 0, 1.f, 1});
      deep_ready_ = true;
    }
    Fill(ctx + 1);
    deep_.position = ctx;
    deep_.pending = {token()};
    return &deep_;
  }

 private:
  void Load(const std::string& key, const EngineSpec& spec) {
    if (engine_ != nullptr && deep_ready_) engine_->ReleaseSession(&deep_);
    deep_ready_ = false;
    engine_.reset();  // free the old weights before loading the next ones
    key_.clear();
    auto model = Model::Load(spec.dir);
    if (!model.ok()) Die(spec.dir, model.status());
    EngineOptions o;
    o.threads = spec.threads;
    o.kv_blocks = spec.kv_blocks;
    o.weight_dtype = spec.dtype;
    o.kv_dtype = spec.kv_dtype;
    // FLATSTATE_BENCH_HEAD_DTYPE=same: the output head at the row's weight type, as llama.cpp's
    // F32 / BF16 / Q8_0 files hold it; or a type name (EngineOptions::head_dtype). Unset: the
    // engine's default.
    if (const char* h = std::getenv("FLATSTATE_BENCH_HEAD_DTYPE"); h != nullptr && *h != 0) {
      if (std::string(h) == "same") {
        o.head_dtype = spec.dtype;
      } else {
        auto head = ParseWeightDtypeOption(h, "FLATSTATE_BENCH_HEAD_DTYPE");
        if (!head.ok()) Die(spec.dir, head.status());
        o.head_dtype = *head;
      }
    }
    auto e = Engine::Create(std::move(*model), o);
    if (!e.ok()) Die(spec.dir, e.status());
    engine_ = std::move(*e);
    params_ = Params(*engine_);
    key_ = key;
    x_ = 2463534242u;
  }

  // The decode cost depends on the context length, not on the values: softmax gets the K/V rows
  // of the deep session's first `tokens` slots filled with cheap pseudo-random values in [-1, 1)
  // (rows kv_dim() wide in each of the pool's kv_layers() layers); linear kinds only move their
  // position (their state has a fixed size).
  void Fill(int64_t tokens) {
    KvBlockPool* pool = engine_->kv_pool();
    if (pool == nullptr) return;
    const size_t filled = deep_.kv_blocks.size();
    if (auto st = pool->Reserve(&deep_.kv_blocks, tokens); !st.ok()) Die("KV", st);
    const ModelConfig& c = engine_->config();
    std::vector<float> row(static_cast<size_t>(c.kv_dim()));
    for (size_t i = filled; i < deep_.kv_blocks.size(); ++i) {
      for (int l = 0; l < c.kv_layers(); ++l) {
        for (int slot = 0; slot < pool->block_size(); ++slot) {
          for (int kv = 0; kv < 2; ++kv) {
            for (float& v : row) {
              x_ ^= x_ << 13, x_ ^= x_ >> 17, x_ ^= x_ << 5;
              v = static_cast<float>(x_ >> 8) * (2.f / 16777216.f) - 1.f;
            }
            pool->WriteRow(deep_.kv_blocks[i], l, kv, slot, row.data());  // in the pool's KvDtype
          }
        }
      }
    }
  }

  std::string key_;
  std::unique_ptr<Engine> engine_;
  double params_ = 0;
  SessionState deep_;
  bool deep_ready_ = false;
  uint32_t x_ = 2463534242u;
};

// n fixed pseudo-random token ids in [0, vocab).
std::vector<int32_t> PromptTokens(int64_t n, int vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  uint32_t x = 5;
  for (auto& v : t) {
    x = x * 1664525u + 1013904223u;
    v = static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(vocab));
  }
  return t;
}

void PrefillCase(benchmark::State& state, EngineSpec spec) {
  Held& held = Held::Get(spec);
  Engine* e = held.engine();
  const std::vector<int32_t> prompt = PromptTokens(state.range(0), e->config().vocab_size);
  // Two untimed prefills first, as llama-bench's warm-up run: a pp512 row is one timed iteration,
  // and right after the model loads the first prefills run slow (after one, Mamba-2 130M bf16's
  // first timed 1-thread pp512 still took 1123-1205 ms against 812-858 for the next ones; after
  // two, 796-849 for all). glibc's malloc: a session's large buffers are mmapped fresh the first
  // time, then come from a heap that grows once more before it is reused (with
  // MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ fixed, one warm-up sufficed: 886-894 ms).
  absl::Status st = PrefillFresh(e, prompt);
  if (st.ok()) st = PrefillFresh(e, prompt);
  for (auto _ : state) {
    if (st.ok()) st = PrefillFresh(e, prompt);
    if (!st.ok()) {
      state.SkipWithError(std::string(st.message()).c_str());
      break;
    }
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.counters["params"] = held.params();
}

// One batch-1 decode step at context `ctx` (< 0: the case's argument).
void DecodeAtDepthCase(benchmark::State& state, EngineSpec spec, int64_t ctx) {
  Held& held = Held::Get(spec);
  Engine* e = held.engine();
  if (ctx < 0) ctx = state.range(0);
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

CompareRows Gpt2CompareRows() { return CompareRows{{512, 4096}, {0, 1024, 16384}, {1, 2}, false}; }

CompareRows CheckpointCompareRows(const std::vector<int64_t>& depths) {
  CompareRows rows{{512}, {0}, {2}, true};
  for (int64_t d : depths) {
    if (d > 0 && std::find(rows.depths.begin(), rows.depths.end(), d) == rows.depths.end()) {
      rows.depths.push_back(d);
    }
  }
  std::sort(rows.depths.begin(), rows.depths.end());
  return rows;
}

void RegisterCompareBenchmarks(const std::vector<std::pair<std::string, std::string>>& models,
                               const std::vector<WeightDtype>& dtypes, KvDtype kv_dtype,
                               const CompareRows& rows) {
  // The pool: the deep session's deepest context (+ 1 token) and one longest prompt.
  int64_t deepest = rows.decode ? kDecodeCtx : 0, longest = 0;
  for (int64_t d : rows.depths) deepest = std::max(deepest, d);
  for (int64_t n : rows.prefill_lens) longest = std::max(longest, n);
  const int block = EngineOptions{}.kv_block_size;
  const int kv_blocks = static_cast<int>(KvBlockPool::BlocksFor(deepest + 1, block) +
                                         KvBlockPool::BlocksFor(longest, block) + 64);
  for (const auto& [name, dir] : models) {
    for (WeightDtype dtype : dtypes) {
      for (int threads : {1, 2}) {
        const EngineSpec spec{dir, dtype, threads, kv_dtype, kv_blocks};
        const std::string tag =
            absl::StrCat(name, "/", WeightDtypeName(dtype), "/threads:", threads);
        if (!rows.prefill_lens.empty()) {
          auto* p = benchmark::RegisterBenchmark(absl::StrCat("Prefill/", tag).c_str(), PrefillCase,
                                                 spec);
          p->ArgName("len")->Unit(benchmark::kMillisecond)->UseRealTime();
          for (int64_t len : rows.prefill_lens) p->Arg(len);
        }
        if (rows.decode) {
          benchmark::RegisterBenchmark(absl::StrCat("Decode/", tag).c_str(), DecodeAtDepthCase,
                                       spec, kDecodeCtx)
              ->ArgName("batch")
              ->Arg(1)
              ->Unit(benchmark::kMillisecond)
              ->UseRealTime();
        }
        if (!rows.depths.empty() && std::find(rows.depth_threads.begin(), rows.depth_threads.end(),
                                              threads) != rows.depth_threads.end()) {
          auto* d = benchmark::RegisterBenchmark(absl::StrCat("DecodeAtContext/", tag).c_str(),
                                                 DecodeAtDepthCase, spec, int64_t{-1});
          d->ArgName("ctx")->Unit(benchmark::kMillisecond)->UseRealTime();
          for (int64_t ctx : rows.depths) d->Arg(ctx);
        }
      }
    }
  }
}

}  // namespace flatstate
