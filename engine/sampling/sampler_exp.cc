#include "engine/sampling/sampler_exp.h"

#include <immintrin.h>

#include <bit>
#include <cmath>
#include <cstdint>

namespace flatstate {
namespace {

constexpr double kLog2e = 1.4426950408889634;          // 1 / ln 2
constexpr double kShift = 6755399441055744.0;          // 1.5 * 2^52: x + kShift rounds x to an int
constexpr double kLn2Hi = 6.93147180369123816490e-01;  // ln 2, its low 32 bits zero
constexpr double kLn2Lo = 1.90821492927058770002e-10;  // ln 2 - kLn2Hi
constexpr double kUnderflow = -708.0;                  // below: 0 (e^-708 is near the least normal)
// 1/n! for n = 12 down to 0.
constexpr double kInvFactorial[13] = {1.0 / 479001600.0,
                                      1.0 / 39916800.0,
                                      1.0 / 3628800.0,
                                      1.0 / 362880.0,
                                      1.0 / 40320.0,
                                      1.0 / 5040.0,
                                      1.0 / 720.0,
                                      1.0 / 120.0,
                                      1.0 / 24.0,
                                      1.0 / 6.0,
                                      1.0 / 2.0,
                                      1.0,
                                      1.0};

}  // namespace

double SamplerExp(double x) {
  if (!(x >= kUnderflow)) return 0.0;
  const double t = std::fma(x, kLog2e, kShift);
  const double k = t - kShift;
  double r = std::fma(-k, kLn2Hi, x);
  r = std::fma(-k, kLn2Lo, r);
  double p = kInvFactorial[0];
  for (int i = 1; i < 13; ++i) p = std::fma(p, r, kInvFactorial[i]);
  const int64_t ki = std::bit_cast<int64_t>(t) - std::bit_cast<int64_t>(kShift);
  return p * std::bit_cast<double>(static_cast<uint64_t>(ki + 1023) << 52);
}

namespace {

// Four keys at a time: the same operations as KeyValue and SamplerExp, lane by lane. Returns how
// many it wrote (n rounded down to a multiple of 4); the caller does the rest.
__attribute__((target("avx2,fma"))) size_t ExpWeightsAvx2(const uint64_t* keys, size_t n,
                                                          double max_logit, double inv_t,
                                                          double* out) {
  const __m256i high_words = _mm256_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7);
  const __m128i low31 = _mm_set1_epi32(0x7FFFFFFF), ones = _mm_set1_epi32(-1);
  const __m256d max = _mm256_set1_pd(max_logit), scale = _mm256_set1_pd(inv_t);
  const __m256d log2e = _mm256_set1_pd(kLog2e), shift = _mm256_set1_pd(kShift);
  const __m256d ln2_hi = _mm256_set1_pd(kLn2Hi), ln2_lo = _mm256_set1_pd(kLn2Lo);
  const __m256d underflow = _mm256_set1_pd(kUnderflow);
  const __m256i shift_bits = _mm256_set1_epi64x(std::bit_cast<int64_t>(kShift));
  const __m256i bias = _mm256_set1_epi64x(1023);
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256i k4 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(keys + i));
    const __m128i a =
        _mm_xor_si128(_mm256_castsi256_si128(_mm256_permutevar8x32_epi32(k4, high_words)), ones);
    const __m128i positive = _mm_srai_epi32(a, 31);  // all ones where the float was >= 0
    const __m128i bits = _mm_or_si128(_mm_and_si128(positive, _mm_and_si128(a, low31)),
                                      _mm_andnot_si128(positive, _mm_xor_si128(a, ones)));
    const __m256d x =
        _mm256_mul_pd(_mm256_sub_pd(_mm256_cvtps_pd(_mm_castsi128_ps(bits)), max), scale);
    const __m256d t = _mm256_fmadd_pd(x, log2e, shift);
    const __m256d k = _mm256_sub_pd(t, shift);
    __m256d r = _mm256_fnmadd_pd(k, ln2_hi, x);
    r = _mm256_fnmadd_pd(k, ln2_lo, r);
    __m256d p = _mm256_set1_pd(kInvFactorial[0]);
    for (int j = 1; j < 13; ++j) p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(kInvFactorial[j]));
    const __m256i ki = _mm256_sub_epi64(_mm256_castpd_si256(t), shift_bits);
    const __m256d two_k = _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_add_epi64(ki, bias), 52));
    const __m256d keep = _mm256_cmp_pd(x, underflow, _CMP_GE_OQ);  // false for -inf
    _mm256_storeu_pd(out + i, _mm256_and_pd(_mm256_mul_pd(p, two_k), keep));
  }
  return i;
}

// The same eight keys at a time with AVX-512F (the zero-masked forms: see sampler.cc).
__attribute__((target("avx512f"))) size_t ExpWeightsAvx512(const uint64_t* keys, size_t n,
                                                           double max_logit, double inv_t,
                                                           double* out) {
  constexpr __mmask8 kAll = 0xff;
  const __m512d max = _mm512_set1_pd(max_logit), scale = _mm512_set1_pd(inv_t);
  const __m512d log2e = _mm512_set1_pd(kLog2e), shift = _mm512_set1_pd(kShift);
  const __m512d ln2_hi = _mm512_set1_pd(kLn2Hi), ln2_lo = _mm512_set1_pd(kLn2Lo);
  const __m512d underflow = _mm512_set1_pd(kUnderflow);
  const __m512i shift_bits = _mm512_set1_epi64(std::bit_cast<int64_t>(kShift));
  const __m512i bias = _mm512_set1_epi64(1023);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m512d x = ScaledGapsAvx512(_mm512_loadu_si512(keys + i), max, scale);
    const __m512d t = _mm512_fmadd_pd(x, log2e, shift);
    const __m512d k = _mm512_sub_pd(t, shift);
    __m512d r = _mm512_fnmadd_pd(k, ln2_hi, x);
    r = _mm512_fnmadd_pd(k, ln2_lo, r);
    __m512d p = _mm512_set1_pd(kInvFactorial[0]);
    for (int j = 1; j < 13; ++j) p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(kInvFactorial[j]));
    const __m512i ki = _mm512_sub_epi64(_mm512_castpd_si512(t), shift_bits);
    const __m512d two_k =
        _mm512_castsi512_pd(_mm512_maskz_slli_epi64(kAll, _mm512_add_epi64(ki, bias), 52));
    const __mmask8 keep = _mm512_cmp_pd_mask(x, underflow, _CMP_GE_OQ);  // false for -inf
    _mm512_storeu_pd(out + i, _mm512_maskz_mul_pd(keep, p, two_k));
  }
  return i;
}

}  // namespace

void SamplerExpWeights(const uint64_t* keys, size_t n, double max_logit, double inv_t,
                       double* out) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  size_t i = avx512 ? ExpWeightsAvx512(keys, n, max_logit, inv_t, out) : 0;
  if (avx2) i += ExpWeightsAvx2(keys + i, n - i, max_logit, inv_t, out + i);
  for (; i < n; ++i) {
    out[i] = SamplerExp((static_cast<double>(KeyValue(keys[i])) - max_logit) * inv_t);
  }
}

}  // namespace flatstate
