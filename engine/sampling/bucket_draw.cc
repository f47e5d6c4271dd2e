#include "engine/sampling/bucket_draw.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>

#include "engine/sampling/sampler_exp.h"

namespace flatstate {
namespace {

constexpr int kBuckets = 4096;
constexpr int kCopies = 4;
constexpr size_t kMaxKeys = size_t{1} << 20;
// A crossing bucket larger than this (a run of tied or nearly tied logits) is left to the
// caller's radix sort: std::sort on it would cost more than the sort saved.
constexpr size_t kMaxMembers = 4096;
// The margin, as a fraction of the total (bucket_draw.h: the errors add to under 2^-30.9).
const double kMargin = std::ldexp(1.0, -29);

// bucket[i] = min(kBuckets - 1, int(-gap_i * scale)) for the keys [0, n8), n8 a multiple of 8:
// the scalar loop's operations (the order key's float, widened, minus max_logit, times inv_t,
// times -scale, truncated), eight at a time. The zero-masked forms: see sampler.cc.
__attribute__((target("avx512f,avx512vl"))) void BucketsAvx512(const uint64_t* keys, size_t n8,
                                                               double max_logit, double inv_t,
                                                               double scale, uint16_t* bucket) {
  constexpr __mmask8 kAll = 0xff;
  const __m256i top = _mm256_set1_epi32(kBuckets - 1);
  const __m512d max = _mm512_set1_pd(max_logit), t = _mm512_set1_pd(inv_t),
                neg_scale = _mm512_set1_pd(-scale);
  for (size_t i = 0; i < n8; i += 8) {
    const __m512d gap = ScaledGapsAvx512(_mm512_loadu_si512(keys + i), max, t);
    const __m256i b =
        _mm256_min_epi32(_mm512_maskz_cvttpd_epi32(kAll, _mm512_mul_pd(gap, neg_scale)), top);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(bucket + i), _mm256_maskz_cvtepi32_epi16(kAll, b));
  }
}

// The largest of keys [0, n8), n8 a multiple of 8 (0 for none).
__attribute__((target("avx512f"))) uint64_t MaxKeyAvx512(const uint64_t* keys, size_t n8) {
  __m512i m = _mm512_setzero_si512();
  for (size_t i = 0; i < n8; i += 8)
    m = _mm512_maskz_max_epu64(0xff, m, _mm512_loadu_si512(keys + i));
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, m);
  return *std::max_element(lanes, lanes + 8);
}

// Appends keys[i] for every i in [0, n32) with bucket[i] == b, n32 a multiple of 32, in order:
// 32 bucket numbers compared at once, most groups holding none.
__attribute__((target("avx512f,avx512bw"))) void GatherAvx512(const uint64_t* keys,
                                                              const uint16_t* bucket, size_t n32,
                                                              int b, std::vector<uint64_t>* out) {
  const __m512i want = _mm512_set1_epi16(static_cast<int16_t>(b));
  for (size_t i = 0; i < n32; i += 32) {
    uint32_t hit = _mm512_cmpeq_epi16_mask(_mm512_loadu_si512(bucket + i), want);
    while (hit != 0) {
      out->push_back(keys[i + static_cast<size_t>(std::countr_zero(hit))]);
      hit &= hit - 1;
    }
  }
}

}  // namespace

int32_t BucketDraw(std::span<const uint64_t> keys, double max_logit, double inv_t, float u,
                   BucketDrawScratch* s) {
  const size_t n = keys.size();
  if (n == 0 || n > kMaxKeys) return -1;
  s->weights.resize(n);
  s->bucket.resize(n);
  s->sums.assign(kCopies * kBuckets, 0.0);
  const double* w = s->weights.data();
  SamplerExpWeights(keys.data(), n, max_logit, inv_t, s->weights.data());
  // The lowest scaled gap is the largest order key's. The buckets split [lowest, 0] evenly,
  // b = floor(-gap * scale): monotone in the gap, and so in the sort order.
  static const bool avx512 = __builtin_cpu_supports("avx512f") &&
                             __builtin_cpu_supports("avx512vl") &&
                             __builtin_cpu_supports("avx512bw");
  size_t i = avx512 ? n / 32 * 32 : 0;  // the AVX-512 bodies' share
  uint64_t last = avx512 ? MaxKeyAvx512(keys.data(), i) : 0;
  for (size_t j = i; j < n; ++j) last = std::max(last, keys[j]);
  const double lowest = (static_cast<double>(KeyValue(last)) - max_logit) * inv_t;
  const double scale = lowest < 0 ? (kBuckets - 1) / -lowest : 0.0;
  // Token i adds to copy i % kCopies of the sums: neighbours in one bucket (the common case)
  // then do not wait on each other's store.
  uint16_t* bucket = s->bucket.data();
  if (avx512) BucketsAvx512(keys.data(), i, max_logit, inv_t, scale, bucket);
  for (; i < n; ++i) {
    const double gap = (static_cast<double>(KeyValue(keys[i])) - max_logit) * inv_t;
    bucket[i] = static_cast<uint16_t>(std::min(kBuckets - 1, static_cast<int>(gap * -scale)));
  }
  double* sums = s->sums.data();
  for (i = 0; i < n; ++i) sums[(i % kCopies) * kBuckets + bucket[i]] += w[i];
  for (int c = 1; c < kCopies; ++c) {
    for (int b = 0; b < kBuckets; ++b) sums[b] += sums[c * kBuckets + b];
  }
  double total = 0;
  for (int b = 0; b < kBuckets; ++b) total += sums[b];
  const double r = static_cast<double>(u) * total, margin = kMargin * total;
  double before = 0;  // the running sum before bucket b
  int b = 0;
  while (b < kBuckets && !(before + sums[b] > r)) before += sums[b++];
  if (b == kBuckets) return -1;
  // The crossing bucket's candidates in the sort order, with their weights.
  s->members.clear();
  i = avx512 ? n / 32 * 32 : 0;
  if (avx512) GatherAvx512(keys.data(), bucket, i, b, &s->members);
  for (; i < n; ++i) {
    if (bucket[i] == b) s->members.push_back(keys[i]);
  }
  if (s->members.size() > kMaxMembers) return -1;
  std::sort(s->members.begin(), s->members.end());
  // Their weights again, in this order (the same function of each key).
  std::vector<double>& mw = s->weights;
  mw.resize(s->members.size());
  SamplerExpWeights(s->members.data(), s->members.size(), max_logit, inv_t, mw.data());
  double cum = before;
  for (size_t j = 0; j < s->members.size(); ++j) {
    const double next = cum + mw[j];
    if (next > r) {
      if (next - r > margin && r - cum > margin) {
        return static_cast<int32_t>(s->members[j] & 0xffffffffu);
      }
      return -1;
    }
    cum = next;
  }
  return -1;  // rounding put the crossing past this bucket's end: too close to call
}

}  // namespace flatstate
