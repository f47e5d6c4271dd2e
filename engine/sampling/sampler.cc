#include "engine/sampling/sampler.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/sampling/bucket_draw.h"
#include "engine/sampling/sampler_exp.h"

namespace flatstate {
namespace {

inline uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

inline uint64_t SplitMix64(uint64_t* x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Above this many candidates a plain draw tries BucketDraw before sorting; at or below it the
// sort is std::sort's and cheap.
constexpr size_t kBucketDrawMin = 256;

inline float NanAsMinusInf(float x) {
  return std::isnan(x) ? -std::numeric_limits<float>::infinity() : x;
}

// Sorts keys ascending. Keys arrive in token-id order and their low 32 bits are the id, so a
// stable sort on the high 32 bits alone gives the full order: LSD radix, 11 bits a pass (three
// passes), skipping a pass where every key has the same digit. Short lists use std::sort.
//
// Each pass scatters kParts quarters of the input at once, each quarter into its own share of
// every bucket (its bucket starts after the earlier quarters' keys of that bucket), which keeps
// the sort stable. Why: logits sit in a narrow range, so successive keys mostly share a digit,
// and one scatter loop then waits on its own bucket counter's store every key (70 % of a 50k
// draw's time was that one store); four quarters are four independent chains.
void SortKeys(std::span<uint64_t> keys, std::vector<uint64_t>* tmp) {
  constexpr int kBits = 11, kPasses = 3, kBuckets = 1 << kBits, kParts = 4;
  const size_t n = keys.size();
  if (n <= 256) {
    std::sort(keys.begin(), keys.end());
    return;
  }
  if (tmp->size() < n) tmp->resize(n);
  uint64_t* src = keys.data();
  uint64_t* dst = tmp->data();
  size_t begin[kParts + 1];
  for (int q = 0; q <= kParts; ++q) begin[q] = n * static_cast<size_t>(q) / kParts;
  // Per quarter, its next slot in each bucket: 32 KiB on the stack, no allocation.
  std::array<std::array<uint32_t, kBuckets>, kParts> at;
  for (int p = 0; p < kPasses; ++p) {
    const int shift = 32 + kBits * p;
    auto digit = [shift](uint64_t k) { return (k >> shift) & (kBuckets - 1); };
    for (int q = 0; q < kParts; ++q) {
      at[q].fill(0);
      for (size_t i = begin[q]; i < begin[q + 1]; ++i) ++at[q][digit(src[i])];
    }
    const uint64_t first = digit(src[0]);
    uint32_t total_first = 0;
    for (int q = 0; q < kParts; ++q) total_first += at[q][first];
    if (total_first == n) continue;  // one digit: already in order
    uint32_t sum = 0;
    for (int d = 0; d < kBuckets; ++d) {  // counts -> starts, bucket by bucket, quarter by quarter
      for (int q = 0; q < kParts; ++q) sum += std::exchange(at[q][d], sum);
    }
    const size_t len = begin[1] - begin[0];  // the first quarter is never longer than the rest
    for (size_t i = 0; i < len; ++i) {
      for (int q = 0; q < kParts; ++q) {
        const uint64_t k = src[begin[q] + i];
        dst[at[q][digit(k)]++] = k;
      }
    }
    for (int q = 1; q < kParts; ++q) {  // the quarters one key longer than the first
      for (size_t i = begin[q] + len; i < begin[q + 1]; ++i) {
        dst[at[q][digit(src[i])]++] = src[i];
      }
    }
    std::swap(src, dst);
  }
  if (src != keys.data()) std::copy(src, src + n, keys.data());
}

// The largest logit, NaN counting as -inf (x > m is false for a NaN x). Four running maxima keep
// four compares in flight.
float MaxLogit(const float* logits, int vocab) {
  float m[4] = {-std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                -std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  int i = 0;
  for (; i + 4 <= vocab; i += 4) {
    for (int j = 0; j < 4; ++j) m[j] = logits[i + j] > m[j] ? logits[i + j] : m[j];
  }
  for (; i < vocab; ++i) m[0] = logits[i] > m[0] ? logits[i] : m[0];
  for (int j = 1; j < 4; ++j) m[0] = m[j] > m[0] ? m[j] : m[0];
  return m[0];
}

// The candidate keys of the tokens [0, n8) for a multiple of 8 n8 (the loop in SampleToken, eight
// tokens at a time): the same test in double, the same keys, compressed in token order, so the
// same keys[0, count) as the scalar loop. Returns the count. AVX-512F: compress to a register and
// store all eight lanes (a masked compressing store is microcoded on some CPUs); the lanes past
// the count are overwritten by the next block or lie below keys[n8). The zero-masked forms of
// the conversions and the shift (all lanes): the plain intrinsics' undefined-value sources trip
// GCC 12's -Wmaybe-uninitialized.
__attribute__((target("avx512f"))) size_t CandidateKeysAvx512(const float* logits, size_t n8,
                                                              double max_logit, double inv_t,
                                                              uint64_t* keys) {
  const __m512d max = _mm512_set1_pd(max_logit), scale = _mm512_set1_pd(inv_t),
                cut = _mm512_set1_pd(kSamplerNegligibleExponent);
  const __m256i low31 = _mm256_set1_epi32(0x7fffffff);
  __m512i id = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i eight = _mm512_set1_epi64(8);
  size_t count = 0;
  for (size_t i = 0; i < n8; i += 8) {
    const __m256 x = _mm256_loadu_ps(logits + i);
    const __m512d gap = _mm512_mul_pd(_mm512_sub_pd(_mm512_maskz_cvtps_pd(0xff, x), max), scale);
    const __mmask8 keep = _mm512_cmp_pd_mask(gap, cut, _CMP_GE_OQ);  // NaN: not kept
    // SortKey's order: b ^ 0x7fffffff for b >= 0, b for b < 0 (b: the bits of x + 0.f).
    const __m256i b = _mm256_castps_si256(_mm256_add_ps(x, _mm256_setzero_ps()));
    const __m256i key = _mm256_xor_si256(b, _mm256_andnot_si256(_mm256_srai_epi32(b, 31), low31));
    const __m512i k = _mm512_or_si512(
        _mm512_maskz_slli_epi64(0xff, _mm512_maskz_cvtepu32_epi64(0xff, key), 32), id);
    _mm512_storeu_si512(keys + count, _mm512_maskz_compress_epi64(keep, k));
    count += static_cast<size_t>(std::popcount(static_cast<unsigned>(keep)));
    id = _mm512_add_epi64(id, eight);
  }
  return count;
}

// The draw from the first `kept` keys in the sort order (sampler.h): weights by SamplerExp,
// summed in that order, the top-p prefix, then the first running sum past u * total.
int32_t DrawSorted(std::span<const uint64_t> keys, size_t kept, double max_logit, double inv_t,
                   float top_p, float u, SamplerScratch* scratch) {
  auto id = [&](size_t i) { return static_cast<int32_t>(keys[i] & 0xffffffffu); };
  // Softmax over the kept tokens in double (unnormalised weights; the draw scales by the total),
  // by flatstate's own exp (sampler_exp.h: the same bits on every machine), from the values the
  // keys hold (NaN already -inf there).
  std::vector<double>& weights = scratch->weights;
  weights.resize(kept);
  SamplerExpWeights(keys.data(), kept, max_logit, inv_t, weights.data());
  double total = 0;
  for (size_t i = 0; i < kept; ++i) total += weights[i];

  if (top_p < 1.f) {
    const double target = static_cast<double>(top_p) * total;
    double cum = 0;
    size_t n = 0;
    while (n < kept) {
      cum += weights[n++];
      if (cum >= target) break;
    }
    kept = n;
    total = cum;
  }

  const double r = static_cast<double>(u) * total;
  double cum = 0;
  for (size_t i = 0; i < kept; ++i) {
    cum += weights[i];
    if (r < cum) return id(i);
  }
  return id(kept - 1);  // not reached: r < total, and the last cum is total
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
                    SamplerScratch* scratch) {
  if (vocab <= 0) return 0;
  // NaN temperature is rejected by ValidateSamplingParams; treat it (and <= 0) as greedy here.
  if (!(params.temperature > 0.f)) return Greedy(logits, vocab);

  const float max = MaxLogit(logits, vocab);
  // All -inf or NaN (tied at -inf: id 0 is first), or a +inf (its lowest id): no draw.
  if (max == -std::numeric_limits<float>::infinity()) return 0;
  if (max == std::numeric_limits<float>::infinity()) {
    return static_cast<int32_t>(std::find(logits, logits + vocab, max) - logits);
  }

  // Every path from here draws exactly this one uniform, and nothing else touches the rng.
  const float u = rng->Uniform();
  const double max_logit = max;
  const double inv_t = 1.0 / static_cast<double>(params.temperature);
  std::vector<uint64_t>& all = scratch->keys;
  if (all.size() < static_cast<size_t>(vocab)) all.resize(static_cast<size_t>(vocab));
  const std::span<uint64_t> keys(all.data(), static_cast<size_t>(vocab));
  size_t count = 0;
  size_t kept;
  if (params.top_k > 0 && params.top_k < static_cast<uint32_t>(vocab)) {
    // Top-k: a heap over every token's key picks the k first of the order (NaN as -inf).
    for (int i = 0; i < vocab; ++i) {
      keys[count++] = SortKey(NanAsMinusInf(logits[i]), i);
    }
    kept = params.top_k;
    std::partial_sort(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(kept), keys.end());
  } else {
    // Every token: only the candidates, those whose weight can change a bit of a sum
    // (kSamplerNegligibleExponent), are sorted. The cut is monotone in the logit, so they are a
    // prefix of the order. Branch-free compaction: each key is written, and kept if it passes.
    static const bool avx512 = __builtin_cpu_supports("avx512f");
    int i = 0;
    if (avx512) {
      const size_t n8 = static_cast<size_t>(vocab) / 8 * 8;
      count = CandidateKeysAvx512(logits, n8, max_logit, inv_t, keys.data());
      i = static_cast<int>(n8);
    }
    for (; i < vocab; ++i) {
      const float x = logits[i];
      keys[count] = SortKey(x, i);
      count += (static_cast<double>(x) - max_logit) * inv_t >= kSamplerNegligibleExponent;
    }
    kept = count;
    if (params.top_p >= 1.f && count > kBucketDrawMin) {
      // The plain draw: BucketDraw picks the sorted draw's token without the sort when its
      // bounds decide (bucket_draw.h), else the sort below does, from the same u.
      const int32_t token =
          BucketDraw(keys.first(count), max_logit, inv_t, u, &scratch->bucket_draw);
      if (token >= 0) return token;
    }
    SortKeys(keys.first(count), &scratch->tmp);
  }
  return DrawSorted(keys, kept, max_logit, inv_t, params.top_p, u, scratch);
}

}  // namespace flatstate
