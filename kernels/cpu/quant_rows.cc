// The symmetric block quantisation (kernels/gemm.h: QuantizeBlockInt8 / QuantizeBlockInt4) and
// the integer GEMMs' quantised activation rows (cpu::QuantRows, gemm_internal.h).
//
// QuantizeBlock is the definition. The vector bodies quantise a full block of 32 with the same
// operations on every lane: |x| and its maximum (exact, in any order), the finite test, one
// division by the same scale (IEEE division: the same float), round to nearest-even (the
// definition's nearbyint under the default rounding mode), the clamp, and an exact conversion.
// So they give the definition's bits; gemm_test compares every ISA's GEMM, quantisation
// included, with the scalar one. A partial last block (k not a multiple of 32) takes the scalar
// path on every ISA. Before these bodies a 32-row batch of RWKV-7 0.1B spent ~6 % of its
// decode step's CPU time in the scalar loop (nearbyint is a libm call per element), on one
// thread: docs/benchmarks.md.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/gemm_internal.h"
#include "kernels/gemm.h"

namespace flatstate {
namespace {

constexpr int64_t kB = PackedWeight::kInt8Block;
constexpr float kInt8Max = 127.f;

// Symmetric quantisation of one block to [-qmax, qmax] (kernels/gemm.h).
float QuantizeBlock(const float* x, int64_t len, float qmax, int8_t* q) {
  float amax = 0.f;
  bool finite = true;
  for (int64_t t = 0; t < len; ++t) {
    const float a = std::fabs(x[t]);
    finite = finite && a <= std::numeric_limits<float>::max();  // false for Inf and NaN
    amax = std::max(amax, a);
  }
  std::memset(q, 0, kB);
  if (!finite) return std::numeric_limits<float>::quiet_NaN();
  if (amax == 0.f) return 0.f;
  const float scale = amax / qmax;
  for (int64_t t = 0; t < len; ++t) {
    const float r = std::nearbyint(x[t] / scale);  // the default rounding: nearest-even
    q[t] = static_cast<int8_t>(std::clamp(r, -qmax, qmax));
  }
  return scale;
}

// A full block to int8 (QuantizeBlock with len 32, qmax 127); *sum = the sum of its quants.
// The zero-masked forms (all lanes): the plain intrinsics' undefined-value sources trip GCC 12's
// -Wmaybe-uninitialized.
__attribute__((target("avx512f"))) float QuantizeFullBlockAvx512(const float* x, int8_t* q,
                                                                 int32_t* sum) {
  constexpr __mmask16 kAll = 0xffff;
  const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
  const __m512 a0 = _mm512_abs_ps(x0), a1 = _mm512_abs_ps(x1);
  const __m512 big = _mm512_set1_ps(std::numeric_limits<float>::max());
  const __mmask16 f0 = _mm512_cmp_ps_mask(a0, big, _CMP_LE_OQ);  // false for Inf and NaN
  const __mmask16 f1 = _mm512_cmp_ps_mask(a1, big, _CMP_LE_OQ);
  if ((f0 & f1) != 0xffff) {
    std::memset(q, 0, kB);
    *sum = 0;
    return std::numeric_limits<float>::quiet_NaN();
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, _mm512_maskz_max_ps(kAll, a0, a1));
  const float amax = *std::max_element(lanes, lanes + 16);
  if (amax == 0.f) {
    std::memset(q, 0, kB);
    *sum = 0;
    return 0.f;
  }
  const float scale = amax / kInt8Max;
  const __m512 s = _mm512_set1_ps(scale), hi = _mm512_set1_ps(kInt8Max),
               lo = _mm512_set1_ps(-kInt8Max);
  __m512i qi[2];
  for (int h = 0; h < 2; ++h) {
    const __m512 r = _mm512_maskz_roundscale_ps(kAll, _mm512_div_ps(h == 0 ? x0 : x1, s),
                                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    qi[h] = _mm512_maskz_cvtps_epi32(
        kAll, _mm512_maskz_min_ps(kAll, _mm512_maskz_max_ps(kAll, r, lo), hi));
  }
  const __m512i q0 = qi[0], q1 = qi[1];
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_maskz_cvtepi32_epi8(kAll, q0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_maskz_cvtepi32_epi8(kAll, q1));
  alignas(64) int32_t part[16];
  _mm512_store_si512(part, _mm512_add_epi32(q0, q1));
  int32_t all = 0;
  for (int32_t p : part) all += p;
  *sum = all;
  return scale;
}

// The same on AVX2: four vectors of 8.
__attribute__((target("avx2"))) float QuantizeFullBlockAvx2(const float* x, int8_t* q,
                                                            int32_t* sum) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 big = _mm256_set1_ps(std::numeric_limits<float>::max());
  __m256 v[4], amax = _mm256_setzero_ps();
  int finite = 0xff;
  for (int g = 0; g < 4; ++g) {
    v[g] = _mm256_loadu_ps(x + 8 * g);
    const __m256 a = _mm256_and_ps(v[g], magnitude);
    finite &= _mm256_movemask_ps(_mm256_cmp_ps(a, big, _CMP_LE_OQ));  // false for Inf and NaN
    amax = _mm256_max_ps(amax, a);
  }
  if (finite != 0xff) {
    std::memset(q, 0, kB);
    *sum = 0;
    return std::numeric_limits<float>::quiet_NaN();
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, amax);
  const float m = *std::max_element(lanes, lanes + 8);
  if (m == 0.f) {
    std::memset(q, 0, kB);
    *sum = 0;
    return 0.f;
  }
  const float scale = m / kInt8Max;
  const __m256 s = _mm256_set1_ps(scale), hi = _mm256_set1_ps(kInt8Max),
               lo = _mm256_set1_ps(-kInt8Max);
  alignas(32) int32_t ints[kB];
  __m256i total = _mm256_setzero_si256();
  for (int g = 0; g < 4; ++g) {
    const __m256 r =
        _mm256_round_ps(_mm256_div_ps(v[g], s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256i qi = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi));
    total = _mm256_add_epi32(total, qi);
    _mm256_store_si256(reinterpret_cast<__m256i*>(ints + 8 * g), qi);
  }
  for (int64_t t = 0; t < kB; ++t) q[t] = static_cast<int8_t>(ints[t]);
  alignas(32) int32_t part[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(part), total);
  int32_t all = 0;
  for (int32_t p : part) all += p;
  *sum = all;
  return scale;
}

}  // namespace

float QuantizeBlockInt8(const float* x, int64_t len, int8_t* q) {
  return QuantizeBlock(x, len, kInt8Max, q);
}

float QuantizeBlockInt4(const float* x, int64_t len, int8_t* q) {
  return QuantizeBlock(x, len, 7.f, q);
}

namespace cpu {

void QuantRows::Fill(const float* x, int64_t m, int64_t k, const Parallel& par, GemmIsa isa) {
  nb = (k + kB - 1) / kB;
  q.resize(static_cast<size_t>(m * nb * kB));
  s.resize(static_cast<size_t>(m * nb));
  sum.resize(static_cast<size_t>(m * nb));
  using FullBlockFn = float (*)(const float*, int8_t*, int32_t*);
  FullBlockFn full = nullptr;
  if (isa == GemmIsa::kAvx512) full = &QuantizeFullBlockAvx512;
  if (isa == GemmIsa::kAvx2) full = &QuantizeFullBlockAvx2;
  const int64_t full_blocks = full == nullptr ? 0 : k / kB;
  auto rows = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * k;
      for (int64_t b = 0; b < full_blocks; ++b) {
        const int64_t i = r * nb + b;
        s[i] = full(xr + b * kB, q.data() + i * kB, &sum[i]);
      }
      for (int64_t b = full_blocks; b < nb; ++b) {
        const int64_t i = r * nb + b;
        int8_t* qb = q.data() + i * kB;
        s[i] = QuantizeBlockInt8(xr + b * kB, std::min(kB, k - b * kB), qb);
        int32_t total = 0;
        for (int64_t t = 0; t < kB; ++t) total += qb[t];
        sum[i] = total;
      }
    }
  };
  if (par.num_threads() == 1 || m * k < (int64_t{1} << 16)) {
    rows(0, m);
  } else {
    par.For(m, rows);
  }
}

QuantRows& ThreadQuantRows() {
  static thread_local QuantRows rows;
  return rows;
}

}  // namespace cpu
}  // namespace flatstate
