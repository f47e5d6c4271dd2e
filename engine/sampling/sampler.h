// Token sampling: greedy, temperature, top-k, top-p; seeded per session.
//
// Rng is a small value type (xoshiro256**, seeded through splitmix64) whose whole state is four
// uint64 words, so it serializes exactly into a checkpoint. It belongs to one session; it is not
// thread-safe. SampleToken is a pure function of (logits, params, rng state): the same inputs give
// the same token on every machine and in every batch composition.
#ifndef FLATSTATE_ENGINE_SAMPLING_SAMPLER_H_
#define FLATSTATE_ENGINE_SAMPLING_SAMPLER_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "engine/sampling/bucket_draw.h"

namespace flatstate {

struct SamplingParams {
  float temperature = 0.f;  // 0: greedy
  uint32_t top_k = 0;       // 0: no top-k cut
  float top_p = 1.f;        // in (0, 1]
  uint64_t seed = 0;
};

// InvalidArgument naming the field ("sampling.temperature", "sampling.top_p") when out of range:
// temperature < 0 or not finite, top_p outside (0, 1].
absl::Status ValidateSamplingParams(const SamplingParams& params);

class Rng {
 public:
  Rng() { Seed(0); }
  explicit Rng(uint64_t seed) { Seed(seed); }
  void Seed(uint64_t seed);
  uint64_t Next();
  // Uniform in [0, 1) with 24 bits of randomness.
  float Uniform();
  const std::array<uint64_t, 4>& state() const { return s_; }
  void set_state(const std::array<uint64_t, 4>& s) { s_ = s; }
  bool operator==(const Rng& o) const { return s_ == o.s_; }

 private:
  std::array<uint64_t, 4> s_;
};

// Tokens whose scaled gap to the top logit, (x - max) / temperature, is below this weigh
// exp(gap) < 4.3e-18, under half an ulp (2^-53) of any running sum that already holds the top
// token's exact 1.0: adding them changes no bit of any sum a draw makes, so SampleToken never
// sorts or exp's them (the draw is the same as with every token sorted).
inline constexpr double kSamplerNegligibleExponent = -40.0;

// Storage SampleToken reuses between calls, so that a step allocates nothing. One per thread
// that samples; not thread-safe.
struct SamplerScratch {
  std::vector<uint64_t> keys, tmp;  // candidate sort keys: order key << 32 | token id
  std::vector<double> weights;
  BucketDrawScratch bucket_draw;
};

// Picks a token id in [0, vocab) from raw logits. Greedy (temperature == 0) takes the lowest index
// of the maximum and does not touch the rng. Otherwise: logits / temperature, keep the top_k
// largest (ties broken by lower index), softmax in double, keep the smallest prefix (by descending
// probability) whose mass reaches top_p, draw one Uniform() from rng. The weights are flatstate's
// own exp of each scaled gap (SamplerExp, sampler_exp.h: not the C library's, which differs
// between library versions) summed in that descending order, so the result is one fixed function
// of its inputs.
// NaN logits are never sampled (treated as -inf). If the largest logit is +inf or -inf, the lowest
// index holding it is returned without a draw. vocab <= 0 returns 0.
//
// Cost: O(vocab) to find the candidates (eight at a time with AVX-512F, the same keys in the same
// order), then sorting (a radix sort past 256 of them) and
// exp'ing only the candidates (the tokens at or above kSamplerNegligibleExponent, eight at a
// time with AVX-512F, four with AVX2), with the same result as sorting every token. A plain draw
// (no top-k, top_p = 1) past 256 candidates first asks BucketDraw (bucket_draw.h), which finds the
// same token without the sort whenever its error bounds decide it, and sorts only when they do not.
// Measured at 256, 50,257, 65,536 and 248,320 tokens (bench: flatstate-bench
// --benchmark_filter=Sample/, docs/benchmarks.md).
int32_t SampleToken(const float* logits, int vocab, const SamplingParams& params, Rng* rng,
                    SamplerScratch* scratch);

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_SAMPLING_SAMPLER_H_
