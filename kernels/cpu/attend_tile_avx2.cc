// The AVX2 body of kernels/cpu/attend_tile.h, for CPUs without AVX-512. It computes the scalar
// body's operations with each 16-lane vector of the definition held as two 8-lane halves (lanes
// 0-7 and 8-15), so the halving trees, the exp and the fma chains are the same IEEE operations
// in the same order and the bits are the scalar body's (and the AVX-512 body's).
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/attend_tile.h"
#include "kernels/cpu/attend_tile_internal.h"

namespace flatstate::cpu {
namespace {

using attend_internal::FinishTask;
using attend_internal::GroupRows;
using attend_internal::kLanes;
using attend_internal::kNegInf;
using attend_internal::StartTask;
using attend_internal::TaskState;

// GCC 12 reports the undefined-value sources of some intrinsics as (maybe-)uninitialized once
// inlined; those lanes are never read. Clang, which builds the fuzzers, has no such warning.
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#define FS_AVX2 __attribute__((target("avx2,fma")))

// One 16-lane vector of the definition: lanes 0-7 in lo, 8-15 in hi.
struct V16 {
  __m256 lo, hi;
};

FS_AVX2 inline V16 Load16(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
FS_AVX2 inline __m256 Widen8(const uint16_t* p) {  // bf16 -> f32, exactly
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
}
FS_AVX2 inline V16 Load16(const uint16_t* p) { return {Widen8(p), Widen8(p + 8)}; }

// ExpNonPositive on 8 lanes.
FS_AVX2 inline __m256 Exp8(__m256 x) {
  const __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(kExpMin), _CMP_LT_OQ);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kExpLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(kExpMinusLn2Hi), x);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(kExpLn2Lo), r);
  __m256 y = _mm256_set1_ps(kExpPoly[0]);
  for (int i = 1; i < 6; ++i) y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(kExpPoly[i]));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), r);
  y = _mm256_add_ps(y, _mm256_set1_ps(1.f));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(tiny, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));  // tiny lanes: 0
}

// The halving tree over 16 lanes: + 8 (hi onto lo), then + 4, + 2, + 1 within lo.
FS_AVX2 inline float HalvingSum16(V16 x) {
  const __m256 a = _mm256_add_ps(x.lo, x.hi);
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
}

// Lane j of the result = the halving-tree sum of a[j]'s 16 lanes.
FS_AVX2 inline V16 HalvingSums16(const V16 (&a)[kLanes]) {
  __m256 s[kLanes], t[8], u[4], v[2];
  for (int j = 0; j < kLanes; ++j) s[j] = _mm256_add_ps(a[j].lo, a[j].hi);  // + 8
  for (int j = 0; j < 8; ++j) {  // + 4: halves hold keys j | j + 8
    t[j] = _mm256_add_ps(_mm256_permute2f128_ps(s[j], s[j + 8], 0x20),
                         _mm256_permute2f128_ps(s[j], s[j + 8], 0x31));
  }
  for (int j = 0; j < 4; ++j) {  // + 2: pairs hold keys j, j + 4 | j + 8, j + 12
    u[j] = _mm256_add_ps(_mm256_shuffle_ps(t[j], t[j + 4], 0x44),
                         _mm256_shuffle_ps(t[j], t[j + 4], 0xEE));
  }
  for (int j = 0; j < 2; ++j) {  // + 1: keys j, j + 4, j + 2, j + 6 | j + 8, j + 12, j + 10, j + 14
    v[j] = _mm256_add_ps(_mm256_shuffle_ps(u[j], u[j + 2], 0x88),
                         _mm256_shuffle_ps(u[j], u[j + 2], 0xDD));
  }
  // Put key j in lane j: unpack gives 0 1 4 5 | 8 9 12 13 and 2 3 6 7 | 10 11 14 15.
  const __m256 w0 = _mm256_unpacklo_ps(v[0], v[1]), w1 = _mm256_unpackhi_ps(v[0], v[1]);
  const __m256 x0 = _mm256_shuffle_ps(w0, w1, 0x44);  // 0 1 2 3 | 8 9 10 11
  const __m256 x1 = _mm256_shuffle_ps(w0, w1, 0xEE);  // 4 5 6 7 | 12 13 14 15
  return {_mm256_permute2f128_ps(x0, x1, 0x20), _mm256_permute2f128_ps(x0, x1, 0x31)};
}

FS_AVX2 inline float Max8(__m256 x) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

// Rows of a task against one key group (rows krow / vrow, len of them) for head h of the task.
// C = hd / 16 is a constant so the loops unroll; the 2C halves of the V sums are independent fma
// chains.
template <typename T, int C>
FS_AVX2 inline void GroupHead(const AttendTask& t, const TaskState& st, int64_t t0, int len,
                              const T* const* krow, const T* const* vrow, int h) {
  constexpr int hd = C * kLanes;
  const __m256 scale = _mm256_set1_ps(1.f / std::sqrt(static_cast<float>(hd)));
  const __m256 lane_lo = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 lane_hi = _mm256_setr_ps(8, 9, 10, 11, 12, 13, 14, 15);
  const int64_t qoff = static_cast<int64_t>(t.h0 + h) * hd;  // q and out of head h
  const int64_t koff = t.KvOffset(h);  // from the K/V head of the task's first head
  for (int i = 0; i < t.n; ++i) {
    const PagedRow& r = t.rows[i];
    const int keys = static_cast<int>(std::min<int64_t>(len, r.ctx - t0));
    if (keys <= 0) continue;
    const float* q = t.qkv + r.row * t.stride + qoff;
    V16 qv[C];
    for (int c = 0; c < C; ++c) qv[c] = Load16(q + c * kLanes);
    V16 part[kLanes];
    for (int j = 0; j < kLanes; ++j) {
      const T* k = krow[j] + koff;
      const V16 k0 = Load16(k);
      part[j] = {_mm256_mul_ps(qv[0].lo, k0.lo), _mm256_mul_ps(qv[0].hi, k0.hi)};
      for (int c = 1; c < C; ++c) {
        const V16 kc = Load16(k + c * kLanes);
        part[j].lo = _mm256_fmadd_ps(qv[c].lo, kc.lo, part[j].lo);
        part[j].hi = _mm256_fmadd_ps(qv[c].hi, kc.hi, part[j].hi);
      }
    }
    const V16 dots = HalvingSums16(part);
    const __m256 n_keys = _mm256_set1_ps(static_cast<float>(keys));
    const __m256 neg_inf = _mm256_set1_ps(kNegInf);
    const V16 sc = {_mm256_blendv_ps(neg_inf, _mm256_mul_ps(dots.lo, scale),
                                     _mm256_cmp_ps(lane_lo, n_keys, _CMP_LT_OQ)),
                    _mm256_blendv_ps(neg_inf, _mm256_mul_ps(dots.hi, scale),
                                     _mm256_cmp_ps(lane_hi, n_keys, _CMP_LT_OQ))};
    const int64_t x = static_cast<int64_t>(i) * st.nh + h;
    const float m_new = std::max(st.m[x], Max8(_mm256_max_ps(sc.lo, sc.hi)));
    const float cr = ExpNonPositive(st.m[x] - m_new);
    const __m256 mv = _mm256_set1_ps(m_new);
    const V16 p = {Exp8(_mm256_sub_ps(sc.lo, mv)), Exp8(_mm256_sub_ps(sc.hi, mv))};  // -inf: 0
    st.l[x] = std::fma(st.l[x], cr, HalvingSum16(p));
    st.m[x] = m_new;
    alignas(32) float pj[kLanes];
    _mm256_store_ps(pj, p.lo);
    _mm256_store_ps(pj + 8, p.hi);
    float* a = st.acc + x * hd;
    const __m256 cv = _mm256_set1_ps(cr);
    V16 av[C];
    for (int c = 0; c < C; ++c) {
      av[c] = {_mm256_mul_ps(_mm256_loadu_ps(a + c * kLanes), cv),
               _mm256_mul_ps(_mm256_loadu_ps(a + c * kLanes + 8), cv)};
    }
    for (int j = 0; j < keys; ++j) {
      const __m256 pb = _mm256_set1_ps(pj[j]);
      const T* v = vrow[j] + koff;
      for (int c = 0; c < C; ++c) {
        const V16 vc = Load16(v + c * kLanes);
        av[c].lo = _mm256_fmadd_ps(pb, vc.lo, av[c].lo);
        av[c].hi = _mm256_fmadd_ps(pb, vc.hi, av[c].hi);
      }
    }
    for (int c = 0; c < C; ++c) {
      _mm256_storeu_ps(a + c * kLanes, av[c].lo);
      _mm256_storeu_ps(a + c * kLanes + 8, av[c].hi);
    }
  }
}

// Key group by key group (the AVX-512 body's walk), one head at a time inside a group.
template <typename T, int C>
FS_AVX2 void Avx2Body(const AttendTask& t, AttendScratch* s) {
  TaskState st = StartTask(t, s);
  const T* krow[kLanes];
  const T* vrow[kLanes];
  for (int64_t t0 = 0; t0 < st.ctx_max; t0 += kLanes) {
    const int len = static_cast<int>(std::min<int64_t>(kLanes, st.ctx_max - t0));
    GroupRows<T>(t, t0, len, krow, vrow);
    for (int h = 0; h < st.nh; ++h) GroupHead<T, C>(t, st, t0, len, krow, vrow, h);
  }
  FinishTask(t, st);
}

#undef FS_AVX2
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace

void AttendTileAvx2(const AttendTask& t, AttendScratch* s) {
  attend_internal::DispatchTypeAndChunks(t, [&]<typename T, int C>() { Avx2Body<T, C>(t, s); });
}

}  // namespace flatstate::cpu
