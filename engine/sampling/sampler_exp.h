// The exponential SampleToken weighs its candidates with (sampler.h), written here so that a
// draw is the same on every machine: the C library's exp is not the same function in every
// library version, and one ulp of one weight can move the draw across a token boundary.
//
// SamplerExp(x) for x <= 0 (the scaled gap (logit - max) / temperature):
//   x < -708 (and -inf): 0. Otherwise k = the integer nearest x / ln 2 (ties: even), r = x - k ln 2
//   (two fma steps, ln 2 split in a high part with 32 zero low bits and a low part), p = the
//   degree-12 Taylor polynomial of e^r by Horner's rule in fma from 1/12! down to 1, and the
//   result p * 2^k (exact). |r| <= 0.35, so the truncation is below 2e-16 relative: within 2 ulp
//   of e^x (tests/engine/sampling/sampler_exp_test.cc checks 4 ulp against std::exp).
// Every step is one IEEE operation, so the scalar definition and the AVX2 and AVX-512 bodies give
// the same bits.
//
// Stateless, thread-safe, never fails.
#ifndef FLATSTATE_ENGINE_SAMPLING_SAMPLER_EXP_H_
#define FLATSTATE_ENGINE_SAMPLING_SAMPLER_EXP_H_

#include <immintrin.h>

#include <bit>
#include <cstddef>
#include <cstdint>

namespace flatstate {

// The definition above, one value (x <= 0 or -inf; larger x are not its domain).
double SamplerExp(double x);

// out[i] = SamplerExp((double(v_i) - max_logit) * inv_t) for the n sort keys of SampleToken
// (key = order << 32 | token id, the order being the float v_i's bits mapped so that ascending
// keys are descending floats: SortKey). The key holds v_i itself, so the
// logits are not read again. AVX-512F eight at a time, AVX2 + FMA four at a time, when the CPU
// has them, the scalar definition otherwise:
// the same bits either way. v_i must not be NaN (SampleToken maps NaN to -inf).
void SamplerExpWeights(const uint64_t* keys, size_t n, double max_logit, double inv_t, double* out);

// SampleToken's sort key of token `id` with logit x (not NaN): ascending keys are descending
// logits, ties by ascending id; -0 keys as +0. The high 32 bits order the floats, the low 32 are
// the id.
inline uint64_t SortKey(float x, int32_t id) {
  const uint32_t b = std::bit_cast<uint32_t>(x + 0.f);  // + 0.f: -0 becomes +0
  const uint32_t ascending = (b & 0x80000000u) != 0 ? ~b : (b | 0x80000000u);
  return static_cast<uint64_t>(~ascending) << 32 | static_cast<uint32_t>(id);
}

// The float a sort key orders by (the inverse of SortKey: -0 came in as +0).
inline float KeyValue(uint64_t key) {
  const uint32_t ascending = ~static_cast<uint32_t>(key >> 32);
  const uint32_t bits = (ascending & 0x80000000u) != 0 ? ascending & 0x7FFFFFFFu : ~ascending;
  return std::bit_cast<float>(bits);
}

// The scaled gaps (double(KeyValue(key)) - max_logit) * inv_t of eight keys: KeyValue's bit
// operations lane by lane, then the same widening, subtraction and product as the scalar code
// (the zero-masked forms: GCC 12 warns on the plain ones' undefined sources). For AVX-512F
// callers (SamplerExpWeights, BucketDraw).
__attribute__((target("avx512f"))) inline __m512d ScaledGapsAvx512(__m512i keys, __m512d max_logit,
                                                                   __m512d inv_t) {
  constexpr __mmask8 kAll = 0xff;
  const __m256i ones = _mm256_set1_epi32(-1), low31 = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i a = _mm256_xor_si256(
      _mm512_maskz_cvtepi64_epi32(kAll, _mm512_maskz_srli_epi64(kAll, keys, 32)), ones);
  const __m256i positive = _mm256_srai_epi32(a, 31);  // all ones where the float was >= 0
  const __m256i bits = _mm256_or_si256(_mm256_and_si256(positive, _mm256_and_si256(a, low31)),
                                       _mm256_andnot_si256(positive, _mm256_xor_si256(a, ones)));
  return _mm512_mul_pd(
      _mm512_sub_pd(_mm512_maskz_cvtps_pd(kAll, _mm256_castsi256_ps(bits)), max_logit), inv_t);
}

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_SAMPLING_SAMPLER_EXP_H_
