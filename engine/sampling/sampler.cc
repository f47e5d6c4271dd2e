#include "engine/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace flatstate {
namespace {

inline uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

inline uint64_t SplitMix64(uint64_t* x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Strict total order used for top-k and top-p: larger logit first, lower token id on ties.
inline bool Before(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  if (a.first != b.first) return a.first > b.first;
  return a.second < b.second;
}

int32_t Greedy(const float* logits, int vocab) {
  int32_t best = 0;
  // NaN never compares greater, so a NaN logit is never picked over a number.
  for (int i = 1; i < vocab; ++i) {
    if (logits[i] > logits[best] || (std::isnan(logits[best]) && !std::isnan(logits[i]))) {
      best = i;
    }
  }
  return best;
}

}  // namespace

absl::Status ValidateSamplingParams(const SamplingParams& params) {
  if (!std::isfinite(params.temperature) || params.temperature < 0.f) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.temperature = ", params.temperature,
                                                   " must be a finite number >= 0"));
  }
  if (!(params.top_p > 0.f && params.top_p <= 1.f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.top_p = ", params.top_p, " must be in (0, 1]"));
  }
  return absl::OkStatus();
}

void Rng::Seed(uint64_t seed) {
  uint64_t x = seed;
  for (uint64_t& w : s_) w = SplitMix64(&x);
}

uint64_t Rng::Next() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

float Rng::Uniform() {
  return static_cast<float>(Next() >> 40) * (1.0f / static_cast<float>(1u << 24));
}

int32_t SampleToken(const float* logits, int vocab, const SamplingParams& params, Rng* rng,
                    std::vector<std::pair<float, int32_t>>* scratch) {
  if (vocab <= 0) return 0;
  // NaN temperature is rejected by ValidateSamplingParams; treat it (and <= 0) as greedy here.
  if (!(params.temperature > 0.f)) return Greedy(logits, vocab);

  auto& c = *scratch;
  c.resize(vocab);
  for (int i = 0; i < vocab; ++i) {
    const float x = logits[i];
    // NaN logits are treated as -inf: never sampled.
    c[i] = {std::isnan(x) ? -std::numeric_limits<float>::infinity() : x, i};
  }
  size_t kept = c.size();
  if (params.top_k > 0 && params.top_k < kept) {
    kept = params.top_k;
    std::partial_sort(c.begin(), c.begin() + kept, c.end(), Before);
  } else {
    std::sort(c.begin(), c.end(), Before);
  }
  const double max_logit = c[0].first;
  if (!std::isfinite(max_logit)) return c[0].second;  // all -inf (or +inf): deterministic pick

  // Softmax over the kept tokens in double (unnormalised weights; the draw scales by the total).
  thread_local std::vector<double> weights;
  weights.resize(kept);
  const double inv_t = 1.0 / static_cast<double>(params.temperature);
  double total = 0;
  for (size_t i = 0; i < kept; ++i) {
    weights[i] = std::exp((static_cast<double>(c[i].first) - max_logit) * inv_t);
    total += weights[i];
  }

  if (params.top_p < 1.f) {
    const double target = static_cast<double>(params.top_p) * total;
    double cum = 0;
    size_t n = 0;
    while (n < kept) {
      cum += weights[n++];
      if (cum >= target) break;
    }
    kept = n;
    total = cum;
  }

  const double r = static_cast<double>(rng->Uniform()) * total;
  double cum = 0;
  for (size_t i = 0; i < kept; ++i) {
    cum += weights[i];
    if (r < cum) return c[i].second;
  }
  return c[kept - 1].second;
}

}  // namespace flatstate
