// flatstate engine benchmarks (Google Benchmark; not part of ctest).
//
//   build/bench/flatstate-bench [--benchmark_filter=...] [--benchmark_min_time=...]
//
// Models: the shipped models/shakespeare-linear-elu and models/shakespeare-softmax, and synthetic
// GPT-2-small-shaped models (12 layers, d_model 768, 12 heads, MLP 3072, random weights) written
// on first use to $FLATSTATE_BENCH_DIR (default /tmp/flatstate-bench; never committed).
//
// Families (compare ratios inside one run; see docs/benchmarks.md for the targets):
//   Decode/<model>/<type>/threads:T/batch:B   one decode step for B sessions (items = tokens) with
//       the layer weights as <type> = f32 | bf16 | int8 | int4 | bf16dot
//       (EngineOptions::weight_dtype; f32 and bf16 only with FLATSTATE_BENCH_DEVICE other than
//       cpu), each session drawing at
//       temperature 0.8, or greedy with FLATSTATE_BENCH_GREEDY=1 (labelled);
//       counter weight_bytes_per_s = the prepared weights' bytes (GEMM panels + fp32 rest) per
//       second
//   GemmModel/...               GEMM throughput per weight type (bench/gemm_bench.cc)
//   DecodeAtContext/<model>/ctx:N   batch-1 decode step with N tokens of context (not gpt2-*),
//       N = 1024, 16384, 65536 or FLATSTATE_BENCH_CONTEXTS=N1,N2 (FastForward: the position
//       set to N and the K/V cache filled with N random rows; a recurrent state is left as it is,
//       its decode step does the same work at any context)
//   Prefill/<model>/chunked|token_by_token/len:4096   prefill tokens/s (chunked: after one
//       untimed run)
//   Prefill/<gpt2 model>/<type>/threads:T/len:N, DecodeAtContext/<gpt2 model>/<type>/threads:T/
//       ctx:N   the llama.cpp comparison's rows (bench/compare_bench.cc; CPU only)
//   Prefill/<name>/<type>/threads:T/len:N, Decode/<name>/<type>/threads:T/batch:1,
//       DecodeAtContext/<name>/<type>/threads:2/ctx:N   the same-checkpoint comparison's rows
//       for each folder in FLATSTATE_BENCH_COMPARE_MODELS=dir1,dir2 (e.g. a Hugging Face
//       LlamaForCausalLM folder llama.cpp runs converted; <name> its base name), N = 0 and
//       FLATSTATE_BENCH_COMPARE_DEPTHS=N1,N2 (default 16384), prefill lengths
//       FLATSTATE_BENCH_COMPARE_PREFILL=N1,N2 (default 512) (bench/compare_bench.cc; CPU only)
//   MemoryReadBandwidth         single-thread streaming read of 1 GiB (bytes/s), scalar loads
//   MemoryRead/<avx2|avx512>/streams:S/prefetch:P/threads:T   the bandwidth probe
//       (bench/bandwidth_probe.cc): vector loads, S streams per thread, software prefetch or not;
//       the fastest row per thread count is the machine's streaming limit
//   MemoryUpdate/avx512/threads:T   the same 1 GiB read and written back in place (bytes counted
//       both ways): the traffic of a batched recurrent step's states
// The context records gemm_isa (the GEMM bodies every row runs) and, when set, FLATSTATE_ISA
// (FLATSTATE_ISA=avx2 runs the AVX2 bodies on an AVX-512 machine: kernels/gemm.h).
// With FLATSTATE_BENCH_DEVICE=cuda also (issue 17's shapes; see docs/gpu.md):
//   DeviceDecode/<gpt2-small model>/batch:B/ctx:C   one decode step for B sessions at context C,
//       counters bytes_per_step (weights as prepared on the device + state read and written:
//       linear 2 x state bytes per session; softmax the K/V read over the context plus the new
//       row written) and bytes_per_s (bytes_per_step / wall time of a step)
//   DevicePrefill/<gpt2-small model>/len:N   chunked prefill of one N-token prompt
// FLATSTATE_BENCH_WEIGHT_DTYPE=f32|bf16|int8|int4|bf16dot (default f32; bf16dot: CPU) sets the
// layer weights' type of DeviceDecode, DevicePrefill, Prefill/<model>/chunked and DecodeAtContext
// (their label names it), as FLATSTATE_BENCH_KV_DTYPE sets the softmax K/V cache's.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/bandwidth_probe.h"
#include "bench/bench_engines.h"
#include "bench/compare_bench.h"
#include "bench/gemm_bench.h"
#include "engine/runtime/engine.h"
#include "tests/util/model_writer.h"

namespace flatstate {
namespace {

namespace fs = std::filesystem;

void Decode(benchmark::State& state, std::string dir, int threads, WeightDtype dtype) {
  Engine* e = GetEngine(dir, threads, 0, dtype);
  // FLATSTATE_BENCH_GREEDY=1: argmax instead of temperature 0.8 (a random model's flat
  // distribution over a large vocabulary makes every token a candidate of the draw).
  const char* g = std::getenv("FLATSTATE_BENCH_GREEDY");
  const bool greedy = g != nullptr && std::string(g) == "1";
  if (greedy) state.SetLabel("greedy");
  const int batch = static_cast<int>(state.range(0));
  std::vector<SessionState> sessions;
  for (int i = 0; i < batch; ++i) {
    sessions.push_back(e->NewSession(SamplingParams{greedy ? 0.f : 0.8f, 0, 1.f, uint64_t(i)}));
    FastForward(e, &sessions.back(), 64);
    sessions.back().pending = {65};
  }
  std::vector<StepRequest> reqs;
  for (auto& s : sessions) reqs.push_back({&s, 1, true});
  std::vector<StepResult> res;
  for (auto _ : state) {
    // Keep every session at context 65 (the K/V rows of a softmax layer stay reserved).
    for (auto& s : sessions) s.position = 65;
    const absl::Status st = e->Step(reqs, &res);
    if (!st.ok()) {
      state.SkipWithError(absl::StrCat("step failed: ", st.message()).c_str());
      break;
    }
  }
  state.SetItemsProcessed(state.iterations() * batch);
  state.counters["weight_bytes_per_s"] =
      benchmark::Counter(StepWeightBytes(*e) * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["params"] = static_cast<double>(e->model().weight_bytes()) / sizeof(float);
  for (auto& s : sessions) e->ReleaseSession(&s);
}

void DecodeAtContext(benchmark::State& state, std::string dir, int threads) {
  Engine* e = GetEngine(dir, threads, 0, BenchWeightDtype());
  state.SetLabel(absl::StrCat("weights ", WeightDtypeName(e->weight_dtype())));
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

void Prefill(benchmark::State& state, std::string dir, int threads) {
  Engine* e = GetEngine(dir, threads, 0, BenchWeightDtype());
  state.SetLabel(absl::StrCat("weights ", WeightDtypeName(e->weight_dtype())));
  const auto prompt = Tokens(static_cast<size_t>(state.range(0)));
  // One untimed prefill first (as llama-bench's warm-up run): the engine's first step of a
  // size grows its scratch and, on CUDA, picks cuBLAS's kernels for the new shapes.
  absl::Status st = PrefillFresh(e, prompt);
  for (auto _ : state) {
    if (st.ok()) st = PrefillFresh(e, prompt);
    if (!st.ok()) {
      state.SkipWithError(std::string(st.message()).c_str());
      break;
    }
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

// Bytes one decode step must move at least: every weight once (as prepared: StepWeightBytes),
// and per session its linear state
// read and written, or its K/V over the context read and the new row written.
double DecodeBytesPerStep(const Engine& e, int batch, int64_t ctx) {
  const ModelConfig& c = e.config();
  // A token's K and V rows: kv_dim() floats each in every one of the kv_layers() layers.
  const double kv_row_bytes = 2.0 * sizeof(float) * c.kv_layers() * c.kv_dim();
  const double per_session = c.is_linear() ? 2.0 * static_cast<double>(c.state_bytes())
                                           : kv_row_bytes * (ctx + 1.0) + kv_row_bytes;
  return StepWeightBytes(e) + batch * per_session;
}

void DeviceDecode(benchmark::State& state, std::string dir, bool softmax) {
  const int batch = static_cast<int>(state.range(0));
  const int64_t ctx = state.range(1);
  // A softmax engine's pool holds exactly this case's context (+ 1 block per session).
  const int kv_blocks = softmax ? static_cast<int>(batch * ((ctx + 1 + 15) / 16 + 1)) : 0;
  Engine* e = GetEngine(dir, 2, kv_blocks, BenchWeightDtype());
  state.SetLabel(absl::StrCat("weights ", WeightDtypeName(e->weight_dtype())));
  std::vector<SessionState> sessions;
  sessions.reserve(batch);
  for (int i = 0; i < batch; ++i) {
    // Greedy: the step's model work, like the PyTorch baseline (tools/torch_gpu_bench.py), which
    // samples nothing; Decode/ above includes seeded sampling on the host.
    sessions.push_back(e->NewSession(SamplingParams{0.f, 0, 1.f, uint64_t(i)}));
    FastForward(e, &sessions.back(), ctx);
    sessions.back().pending = {65};
  }
  std::vector<StepRequest> reqs;
  for (auto& s : sessions) reqs.push_back({&s, 1, true});
  std::vector<StepResult> res;
  for (auto _ : state) {
    for (auto& s : sessions) s.position = ctx;  // keep the context at ctx
    if (!e->Step(reqs, &res).ok()) {
      const std::string why(res.empty() ? "step failed" : res[0].status.message());
      state.SkipWithError(why.c_str());
      break;
    }
  }
  const double bytes = DecodeBytesPerStep(*e, batch, ctx);
  state.SetItemsProcessed(state.iterations() * batch);
  state.counters["bytes_per_step"] = bytes;
  state.counters["bytes_per_s"] =
      benchmark::Counter(bytes * state.iterations(), benchmark::Counter::kIsRate);
  for (auto& s : sessions) e->ReleaseSession(&s);
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

// The comma-separated token counts in environment variable `name` (each >= `least`), or `fallback`
// when it is unset; exits naming the variable on a bad entry.
std::vector<int64_t> LengthsFromEnv(const char* name, std::vector<int64_t> fallback,
                                    int64_t least) {
  const char* text = std::getenv(name);
  if (text == nullptr) return fallback;
  std::vector<int64_t> out;
  for (absl::string_view d : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(d, &n) || n < least) {
      std::fprintf(stderr, "%s: '%s' is not a token count >= %lld\n", name, std::string(d).c_str(),
                   static_cast<long long>(least));
      std::exit(1);
    }
    out.push_back(n);
  }
  return out;
}

// The same-checkpoint comparison's rows (bench/compare_llamacpp.sh SAME_CHECKPOINT=1): one set per
// folder in FLATSTATE_BENCH_COMPARE_MODELS=dir1,dir2, named by its base name, at depth 0 and the
// depths in FLATSTATE_BENCH_COMPARE_DEPTHS=N1,N2 (default 16384), prefill lengths
// FLATSTATE_BENCH_COMPARE_PREFILL=N1,N2 (default 512).
void RegisterSameCheckpointRows(const std::vector<WeightDtype>& dtypes) {
  const char* dirs = std::getenv("FLATSTATE_BENCH_COMPARE_MODELS");
  if (dirs == nullptr) return;
  std::vector<std::pair<std::string, std::string>> models;
  for (absl::string_view piece : absl::StrSplit(dirs, ',', absl::SkipEmpty())) {
    std::string d(piece);
    while (d.size() > 1 && d.back() == '/') d.pop_back();
    models.emplace_back(fs::path(d).filename().string(), d);
  }
  const std::vector<int64_t> depths = LengthsFromEnv("FLATSTATE_BENCH_COMPARE_DEPTHS", {16384}, 0);
  CompareRows rows = CheckpointCompareRows(depths);
  rows.prefill_lens = LengthsFromEnv("FLATSTATE_BENCH_COMPARE_PREFILL", {512}, 1);
  RegisterCompareBenchmarks(models, dtypes, BenchKvDtype(), rows);
}

void RegisterAll() {
  const std::string lin = SourceDir() + "/models/shakespeare-linear-elu";
  const std::string soft = SourceDir() + "/models/shakespeare-softmax";
  benchmark::RegisterBenchmark("MemoryReadBandwidth", MemoryReadBandwidth)
      ->Unit(benchmark::kMillisecond)
      ->MinTime(2);
  std::vector<std::pair<std::string, std::string>> models;
  for (const auto& [name, dir] :
       {std::pair<std::string, std::string>{"shakespeare-linear-elu", lin},
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
  // CUDA runs int8/int4 as fp32 weights dequantised at load (f32's bytes and speed, docs/gpu.md),
  // so only f32 and bf16 are worth a row there.
  std::vector<WeightDtype> dtypes = {WeightDtype::kF32, WeightDtype::kBf16};
  if (std::string(BenchDevice()) == "cpu") {
    dtypes.insert(dtypes.end(), {WeightDtype::kInt8, WeightDtype::kInt4});
  }
  // bf16dot (a CPU type) gets Decode rows only; the llama.cpp rows keep their f32 / bf16 / int8
  // pairs.
  std::vector<WeightDtype> decode_dtypes = dtypes;
  if (std::string(BenchDevice()) == "cpu") decode_dtypes.push_back(WeightDtype::kBf16Dot);
  for (int threads : {1, 2}) {
    for (const auto& [name, dir] : models) {
      for (WeightDtype dtype : decode_dtypes) {
        const std::string tag =
            absl::StrCat(name, "/", WeightDtypeName(dtype), "/threads:", threads);
        benchmark::RegisterBenchmark(absl::StrCat("Decode/", tag).c_str(), Decode, dir, threads,
                                     dtype)
            ->ArgName("batch")
            ->Arg(1)
            ->Arg(8)
            ->Arg(16)
            ->Arg(32)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
      }
    }
  }
  if (std::string(BenchDevice()) != "cpu") {
    for (AttentionKind kind : {AttentionKind::kLinearElu, AttentionKind::kSoftmax}) {
      const std::string dir = Gpt2Small(kind);
      const std::string name = absl::StrCat("gpt2-small-", AttentionKindName(kind));
      auto* b = benchmark::RegisterBenchmark(absl::StrCat("DeviceDecode/", name).c_str(),
                                             DeviceDecode, dir, kind == AttentionKind::kSoftmax);
      b->ArgNames({"batch", "ctx"})->Unit(benchmark::kMillisecond)->UseRealTime();
      for (int64_t ctx : {0, 16384, 65536}) {
        for (int batch : {1, 8, 32, 64, 256}) {
          // Softmax K/V beyond ~10 GB per case (also mirrored in host memory) is left out.
          const double kv = 2.0 * 4 * 12 * 768 * static_cast<double>(ctx) * batch;
          if (kind == AttentionKind::kSoftmax && kv > 10e9) continue;
          b->Args({batch, ctx});
        }
      }
      // Softmax prefill stops at 16k: its attention is quadratic (64k would take minutes).
      auto* p = benchmark::RegisterBenchmark(absl::StrCat("DevicePrefill/", name).c_str(), Prefill,
                                             dir, 2);
      p->ArgName("len")
          ->Arg(4096)
          ->Arg(16384)
          ->Unit(benchmark::kMillisecond)
          ->Iterations(1)
          ->UseRealTime();
      if (kind != AttentionKind::kSoftmax) p->Arg(65536);
    }
  }
  if (std::string(BenchDevice()) == "cpu") {
    // The two GPT-2-small models, emplaced last above.
    RegisterCompareBenchmarks(decltype(models)(models.end() - 2, models.end()), dtypes,
                              BenchKvDtype(), Gpt2CompareRows());
    RegisterSameCheckpointRows(dtypes);
  }
  const std::vector<int64_t> contexts =
      LengthsFromEnv("FLATSTATE_BENCH_CONTEXTS", {1024, 16384, 65536}, 0);
  for (const auto& [name, dir] : models) {
    if (name.rfind("gpt2", 0) == 0) continue;  // context sweep on the shipped models
    auto* b = benchmark::RegisterBenchmark(absl::StrCat("DecodeAtContext/", name).c_str(),
                                           DecodeAtContext, dir, 2);
    b->ArgName("ctx")->Unit(benchmark::kMicrosecond)->UseRealTime();
    for (int64_t c : contexts) b->Arg(c);
  }
  for (const auto& [name, dir] : models) {
    benchmark::RegisterBenchmark(absl::StrCat("Prefill/", name, "/chunked").c_str(), Prefill, dir,
                                 2)
        ->ArgName("len")
        ->Arg(4096)
        ->Unit(benchmark::kMillisecond)
        ->Iterations(2)
        ->UseRealTime();
    // Token-by-token prefill of 4k tokens on the GPT-2-small softmax shape takes minutes (each
    // step attends over the growing cache); the linear shapes carry the comparison.
    if (name == "gpt2-small-softmax") continue;
    benchmark::RegisterBenchmark(absl::StrCat("Prefill/", name, "/token_by_token").c_str(),
                                 PrefillTokenByToken, dir, 2)
        ->ArgName("len")
        ->Arg(4096)
        ->Unit(benchmark::kMillisecond)
        ->Iterations(1)
        ->UseRealTime();
  }
}

}  // namespace
}  // namespace flatstate

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  // The GEMM bodies every row runs (FLATSTATE_ISA can force the AVX2 ones: kernels/gemm.h).
  benchmark::AddCustomContext("gemm_isa", flatstate::GemmIsaName(flatstate::ActiveGemmIsa()));
  if (const std::string env = flatstate::IsaFromEnvironment(); !env.empty()) {
    benchmark::AddCustomContext("flatstate_isa", env);
  }
  flatstate::RegisterAll();
  flatstate::RegisterGemmBenchmarks();
  flatstate::bench::RegisterBandwidthProbe();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
