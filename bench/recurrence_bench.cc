// Rwkv7Form/chunk:C (0: the recurrent form): RWKV-7's generalized delta rule for one (sequence,
// head) at head_dim 64 over 512 tokens from a zero state, on one thread: the recurrent form
// (Rwkv7StepCpu, what the CPU op runs for every T) against the chunked form (Rwkv7ChunkCpu, the
// CUDA prefill's math) at chunks of 16, 32 and 64. items_per_second is tokens per second per head.
// Shows why the CPU op runs the recurrent form in prefill (kernels/rwkv7.h; docs/benchmarks.md).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/gated_delta.h"
#include "kernels/rwkv7.h"

namespace flatstate {
namespace {

constexpr int kN = 64;
constexpr int64_t kT = 512;

// A fixed-seed linear congruential stream of floats uniform in [-1, 1) (the inputs' values only
// set the work's shape here, not its cost).
struct Uniform {
  uint32_t seed;
  float operator()() {
    seed = seed * 1664525u + 1013904223u;
    return static_cast<float>(seed >> 8) / 8388608.f - 1.f;
  }
};

struct Rwkv7Rows {
  std::vector<float> r, k, v, lw, kk, a, out;
  Rwkv7Rows() {
    Uniform next{7};
    for (auto* x : {&r, &k, &v, &lw, &kk, &a, &out}) x->resize(kT * kN);
    for (int64_t i = 0; i < kT * kN; ++i) {
      r[i] = next();
      k[i] = next();
      v[i] = next();
      kk[i] = next();
      a[i] = 0.5f + 0.5f * next();
      lw[i] = -0.6065306597f * (0.5f + 0.5f * next());  // RWKV-7's range, (-0.607, 0)
    }
    for (int64_t t = 0; t < kT; ++t) {  // kk unit per token, as the mixer makes it
      float n2 = 0;
      for (int i = 0; i < kN; ++i) n2 += kk[t * kN + i] * kk[t * kN + i];
      for (int i = 0; i < kN; ++i) kk[t * kN + i] /= std::sqrt(n2);
    }
  }
  Rwkv7HeadRows Head() {
    return Rwkv7HeadRows{r.data(),   k.data(), v.data(), lw.data(), kk.data(), a.data(),
                         out.data(), kN,       kN,       kN,        kN};
  }
};

// chunk 0: the recurrent form.
void Rwkv7Form(benchmark::State& state) {
  const int chunk = static_cast<int>(state.range(0));
  Rwkv7Rows rows;
  const Rwkv7HeadRows x = rows.Head();
  std::vector<float> S(kN * kN), scratch(Rwkv7Scratch(kN, chunk == 0 ? 1 : kT, chunk));
  for (auto _ : state) {
    std::fill(S.begin(), S.end(), 0.f);
    if (chunk == 0) {
      Rwkv7StepCpu(kN, x, kT, S.data(), scratch.data());
    } else {
      Rwkv7ChunkCpu(kN, x, kT, 0, chunk, S.data(), scratch.data());
    }
    benchmark::DoNotOptimize(S.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kT);
}

BENCHMARK(Rwkv7Form)->ArgName("chunk")->Arg(0)->Arg(16)->Arg(32)->Arg(64);

void GatedDelta(benchmark::State& state) {
  constexpr int kKd = 128, kVd = 128, kChunk = 64;
  const int64_t T = state.range(0);
  Uniform next{11};
  std::vector<float> q(T * kKd), k(T * kKd), v(T * kVd), g(T), beta(T), out(T * kVd);
  for (auto* x : {&q, &k, &v}) {
    for (float& y : *x) y = next();
  }
  for (int64_t t = 0; t < T; ++t) {
    g[t] = -0.1f * (1.f + next());  // log decays in (-0.2, 0]
    beta[t] = 0.5f + 0.4f * next();
  }
  std::vector<float> S0(kKd * kVd), S, scratch(GatedDeltaScratch(kKd, kVd, T, kChunk));
  for (float& y : S0) y = 0.1f * next();
  for (auto _ : state) {
    S = S0;
    GatedDeltaRuleCpu(kKd, kVd, 0.088f, true, q.data(), k.data(), kKd, v.data(), kVd, g.data(),
                      beta.data(), 1, T, 0, kChunk, S.data(), out.data(), kVd, scratch.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * T);
}

BENCHMARK(GatedDelta)->ArgName("T")->Arg(1)->Arg(512);

}  // namespace
}  // namespace flatstate
