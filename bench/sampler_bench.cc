// Sample/vocab:V/spread:S/top_k:K: one SampleToken draw (temperature 0.8) from V logits drawn as
// max - S * u^2 (u uniform in [0, 1)) with five high outliers, the shape of a language model's
// next-token logits. spread:4 keeps every token a candidate (all within the exp(-40) cut at
// temperature 0.8, the worst case: every token sorted and exp'd); spread:80 leaves out the tail
// below the cut, as real vocabularies mostly do. Engine::Step draws one token per sampling session
// like this, spread over its thread pool. V: a byte model's 256, GPT-2's 50,257, RWKV World's
// 65,536, Qwen3.5's 248,320.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "engine/sampling/sampler.h"

namespace flatstate {
namespace {

std::vector<float> LmLikeLogits(int vocab, float spread) {
  Rng rng(7);
  std::vector<float> v(static_cast<size_t>(vocab));
  for (float& x : v) {
    const float u = rng.Uniform();
    x = -spread * u * u;
  }
  for (int i = 0; i < 5; ++i) v[rng.Next() % static_cast<uint64_t>(vocab)] = 2.f * rng.Uniform();
  return v;
}

void Sample(benchmark::State& state) {
  const int vocab = static_cast<int>(state.range(0));
  const auto logits = LmLikeLogits(vocab, static_cast<float>(state.range(1)));
  const SamplingParams params{0.8f, static_cast<uint32_t>(state.range(2)), 1.f, 1};
  Rng rng(params.seed);
  SamplerScratch scratch;
  for (auto _ : state) {
    benchmark::DoNotOptimize(SampleToken(logits.data(), vocab, params, &rng, &scratch));
  }
  state.SetItemsProcessed(state.iterations());
}

BENCHMARK(Sample)
    ->ArgNames({"vocab", "spread", "top_k"})
    ->ArgsProduct({{256, 50257, 65536, 248320}, {4, 80}, {0, 40}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace flatstate
