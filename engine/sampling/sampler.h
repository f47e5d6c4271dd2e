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

// Picks a token id in [0, vocab) from raw logits. Greedy (temperature == 0) takes the lowest index
// of the maximum and does not touch the rng. Otherwise: logits / temperature, keep the top_k
// largest (ties broken by lower index), softmax in double, keep the smallest prefix (by descending
// probability) whose mass reaches top_p, draw one Uniform() from rng. `scratch` is reused storage.
// NaN logits are never sampled (treated as -inf). If the largest logit is +inf or -inf, the lowest
// index holding it is returned without a draw. vocab <= 0 returns 0.
int32_t SampleToken(const float* logits, int vocab, const SamplingParams& params, Rng* rng,
                    std::vector<std::pair<float, int32_t>>* scratch);

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_SAMPLING_SAMPLER_H_
