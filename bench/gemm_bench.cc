// GEMM throughput per weight type (part of flatstate-bench; see engine_bench.cc's list):
//
//   GemmModel/<type>/<body>/threads:T/batch:B   the 48 GEMMs of one GPT-2-small forward step (12
//       layers of wqkv 2304x768, wo 768x768, w1 3072x768, w2 768x3072: 84.9 M weights, each
//       layer's weights distinct, so nothing stays in cache) on B rows; items = rows (tokens),
//       counter weight_bytes_per_s = packed weight bytes streamed per second.
//
// <type> is f32 | bf16 | int8 | int4 (kernels/gemm.h), <body> the GemmIsa selected for the run
// ("best" is BestGemmIsa(); GemmBodyName tells what ran, e.g. avx512-vnni for int8). Only one
// type's weights are held at a time (prepared on first use).
#include "bench/gemm_bench.h"

#include <benchmark/benchmark.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/util/thread_pool.h"
#include "kernels/gemm.h"

namespace flatstate {
namespace {

struct Shape {
  int64_t n, k;
};
constexpr int kLayers = 12;
constexpr Shape kLayerShapes[] = {{2304, 768}, {768, 768}, {3072, 768}, {768, 3072}};

// The prepared weights of one type (the last one asked for).
const std::vector<GemmWeight<Device::kCpu>>& Weights(WeightDtype dtype) {
  static WeightDtype held = WeightDtype::kF32;
  static std::vector<GemmWeight<Device::kCpu>> weights;
  if (!weights.empty() && held == dtype) return weights;
  weights.clear();
  held = dtype;
  uint32_t seed = 1;
  for (int l = 0; l < kLayers; ++l) {
    for (const Shape& s : kLayerShapes) {
      // Cheap deterministic values with a GPT-2-like spread (|w| < 0.05).
      std::vector<float> w(static_cast<size_t>(s.n * s.k));
      for (float& v : w) {
        seed = seed * 1664525u + 1013904223u;
        v = (static_cast<float>(seed >> 8) / 16777216.f - 0.5f) * 0.1f;
      }
      auto gw = PrepareGemmWeight<Device::kCpu>(w.data(), s.n, s.k, {dtype});
      if (!gw.ok()) std::abort();
      weights.push_back(std::move(*gw));
    }
  }
  return weights;
}

void GemmModel(benchmark::State& state, WeightDtype dtype, GemmIsa isa, int threads) {
  const int64_t batch = state.range(0);
  if (!SetGemmIsa(isa)) {
    state.SkipWithError("body not supported on this CPU");
    return;
  }
  const auto& weights = Weights(dtype);
  PoolParallel par(threads);
  std::vector<float> x(static_cast<size_t>(batch * 3072), 0.5f), y(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 17) * 0.1f - 0.8f;
  double bytes = 0;
  for (const auto& w : weights) bytes += static_cast<double>(w.packed.bytes());
  for (auto _ : state) {
    for (const auto& w : weights) {
      Gemm<Device::kCpu>(x.data(), batch, w, y.data(), false, par);
    }
    benchmark::DoNotOptimize(y.data());
  }
  SetGemmIsa(BestGemmIsa());
  state.SetItemsProcessed(state.iterations() * batch);
  state.counters["weight_bytes_per_s"] =
      benchmark::Counter(bytes * state.iterations(), benchmark::Counter::kIsRate);
  state.SetLabel(GemmBodyName(isa, dtype));
}

}  // namespace

void RegisterGemmBenchmarks() {
  std::vector<std::pair<std::string, GemmIsa>> bodies = {{"best", BestGemmIsa()}};
  if (BestGemmIsa() == GemmIsa::kAvx512) bodies.emplace_back("avx2", GemmIsa::kAvx2);
  for (WeightDtype dtype : {WeightDtype::kF32, WeightDtype::kBf16, WeightDtype::kInt8,
                            WeightDtype::kInt4, WeightDtype::kBf16Dot}) {
    for (const auto& [body, isa] : bodies) {
      for (int threads : {1, 2}) {
        const std::string name =
            absl::StrCat("GemmModel/", WeightDtypeName(dtype), "/", body, "/threads:", threads);
        auto* b = benchmark::RegisterBenchmark(name.c_str(), GemmModel, dtype, isa, threads);
        b->ArgName("batch")->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
        // 32: issue 30's batch-32 decode; 16: its rows per thread when the step splits by sessions
        if (body == "best") b->Arg(8)->Arg(16)->Arg(32);
        b->Arg(64);  // prefill-like: the AVX2 bodies' register tiling shows here
      }
    }
  }
}

}  // namespace flatstate
