// Two of the bodies of kernels/cpu/attend_tile.h (the AVX2 one is attend_tile_avx2.cc). The scalar
// body is the definition, written lane by lane; the AVX-512 body computes the same operations on
// 16 lanes (keys of a group across lanes for the softmax, dimensions across lanes for the dot
// products and the V sums).
#include "kernels/cpu/attend_tile.h"

#include <immintrin.h>

#include <algorithm>
#include <limits>

#include "kernels/cpu/attend_tile_internal.h"

namespace flatstate::cpu {
namespace {

using attend_internal::FinishTask;
using attend_internal::GroupRows;
using attend_internal::HalvingSum;
using attend_internal::kLanes;
using attend_internal::kNegInf;
using attend_internal::PoolRow;
using attend_internal::StartTask;
using attend_internal::TaskState;
using attend_internal::Widen;

template <typename T>
void ScalarBody(const AttendTask& t, AttendScratch* s) {
  TaskState st = StartTask(t, s);
  const float scale = 1.f / std::sqrt(static_cast<float>(t.hd));
  const int hd = t.hd;
  const int64_t off = static_cast<int64_t>(t.h0 / t.group) * hd;
  const int width = t.KvWidth();
  if (s->kbuf.size() < static_cast<size_t>(kLanes) * width) {
    s->kbuf.resize(kLanes * width);
    s->vbuf.resize(kLanes * width);
  }
  for (int64_t t0 = 0; t0 < st.ctx_max; t0 += kLanes) {
    const int len = static_cast<int>(std::min<int64_t>(kLanes, st.ctx_max - t0));
    for (int j = 0; j < len; ++j) {  // the group's rows of the task's heads, widened
      const T* k = PoolRow<T>(*t.kv, t.table, t.layer, 0, t0 + j) + off;
      const T* v = PoolRow<T>(*t.kv, t.table, t.layer, 1, t0 + j) + off;
      for (int d = 0; d < width; ++d) s->kbuf[j * width + d] = Widen(k[d]);
      for (int d = 0; d < width; ++d) s->vbuf[j * width + d] = Widen(v[d]);
    }
    for (int i = 0; i < t.n; ++i) {
      const PagedRow& r = t.rows[i];
      const int keys = static_cast<int>(std::min<int64_t>(len, r.ctx - t0));
      if (keys <= 0) continue;
      for (int h = 0; h < st.nh; ++h) {
        const float* q = t.qkv + r.row * t.stride + off + h * hd;
        float sc[kLanes], part[kLanes];
        float mx = kNegInf;
        for (int j = 0; j < keys; ++j) {
          const float* k = s->kbuf.data() + j * width + t.KvOffset(h);
          for (int lane = 0; lane < kLanes; ++lane) {
            part[lane] = lane < hd ? q[lane] * k[lane] : 0.f;
            for (int d = lane + kLanes; d < hd; d += kLanes)
              part[lane] = std::fma(q[d], k[d], part[lane]);
          }
          sc[j] = HalvingSum(part) * scale;
          mx = std::max(mx, sc[j]);
        }
        float& mi = st.m[i * st.nh + h];
        float& li = st.l[i * st.nh + h];
        const float m_new = std::max(mi, mx);
        const float c = ExpNonPositive(mi - m_new);
        float p[kLanes], ps[kLanes];
        for (int j = 0; j < kLanes; ++j)
          ps[j] = p[j] = j < keys ? ExpNonPositive(sc[j] - m_new) : 0.f;
        li = std::fma(li, c, HalvingSum(ps));
        mi = m_new;
        float* a = st.acc + (static_cast<int64_t>(i) * st.nh + h) * hd;
        for (int d = 0; d < hd; ++d) a[d] *= c;
        for (int j = 0; j < keys; ++j) {
          const float* v = s->vbuf.data() + j * width + t.KvOffset(h);
          for (int d = 0; d < hd; ++d) a[d] = std::fma(p[j], v[d], a[d]);
        }
      }
    }
  }
  FinishTask(t, st);
}

// ---- AVX-512 ---------------------------------------------------------------------------------

// GCC 12 reports the undefined-value sources inside many AVX-512 intrinsics (shuffles, permutes,
// conversions) as -Wmaybe-uninitialized once inlined (-Wuninitialized in sanitizer builds);
// those lanes are never read.
// (Clang, which builds the fuzzers, neither warns nor knows the first group.)
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#define FS_AVX512 __attribute__((target("avx512f")))

FS_AVX512 inline __m512 Load16(const float* p) { return _mm512_loadu_ps(p); }
FS_AVX512 inline __m512 Load16(const uint16_t* p) {  // widened exactly
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
}

// ExpNonPositive on 16 lanes.
FS_AVX512 inline __m512 Exp16(__m512 x) {
  const __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpMin), _CMP_LT_OQ);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kExpLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(kExpMinusLn2Hi), x);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(kExpLn2Lo), r);
  __m512 y = _mm512_set1_ps(kExpPoly[0]);
  for (int i = 1; i < 6; ++i) y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(kExpPoly[i]));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), r);
  y = _mm512_add_ps(y, _mm512_set1_ps(1.f));
  const __m512i e =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~tiny),
                             _mm512_mul_ps(y, _mm512_castsi512_ps(e)));
}

// The halving tree over the 16 lanes of x.
FS_AVX512 inline float HalvingSum16(__m512 x) {
  const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(x),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
}

// Lane j of the result = halving-tree sum of a[j]'s 16 lanes (16 dot products' partials at once).
FS_AVX512 inline __m512 HalvingSums16(const __m512 (&a)[kLanes]) {
  __m512 b[8], c[4], d[2];
  for (int j = 0; j < 8; ++j) {  // lanes L + (L + 8): a[j] in lanes 0-7, a[j + 8] in 8-15
    b[j] = _mm512_add_ps(_mm512_shuffle_f32x4(a[j], a[j + 8], 0x44),
                         _mm512_shuffle_f32x4(a[j], a[j + 8], 0xEE));
  }
  for (int j = 0; j < 4; ++j) {  // + 4: quarters hold keys j, j + 8, j + 4, j + 12
    c[j] = _mm512_add_ps(_mm512_shuffle_f32x4(b[j], b[j + 4], 0x88),
                         _mm512_shuffle_f32x4(b[j], b[j + 4], 0xDD));
  }
  for (int j = 0; j < 2; ++j) {  // + 2
    d[j] = _mm512_add_ps(_mm512_shuffle_ps(c[j], c[j + 2], 0x44),
                         _mm512_shuffle_ps(c[j], c[j + 2], 0xEE));
  }
  const __m512 e = _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], 0x88),  // + 1
                                 _mm512_shuffle_ps(d[0], d[1], 0xDD));
  // Lane 4k + i of e holds key {0, 2, 1, 3}[i] + {0, 8, 4, 12}[k]; put key j in lane j.
  const __m512i order = _mm512_setr_epi32(0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15);
  return _mm512_permutexvar_ps(order, e);
}

// Rows of a task against one key group (rows krow / vrow, len of them) for heads [h, h + NH).
// C = hd / 16 and NH (1 or 2) are constants so that the loops unroll and the partials and sums
// stay in registers; two heads give the V sums 2C independent fma chains.
template <typename T, int C, int NH>
FS_AVX512 inline void GroupHeads(const AttendTask& t, const TaskState& st, int64_t t0, int len,
                                 const T* const* krow, const T* const* vrow, int h) {
  constexpr int hd = C * kLanes;
  const __m512 scale = _mm512_set1_ps(1.f / std::sqrt(static_cast<float>(hd)));
  const int64_t qoff = static_cast<int64_t>(t.h0 + h) * hd;  // q and out of head h
  for (int i = 0; i < t.n; ++i) {
    const PagedRow& r = t.rows[i];
    const int keys = static_cast<int>(std::min<int64_t>(len, r.ctx - t0));
    if (keys <= 0) continue;
    const __mmask16 valid = static_cast<__mmask16>((1u << keys) - 1);
    alignas(64) float pj[NH][kLanes];
    __m512 av[NH][C];
    float* a[NH];
    for (int u = 0; u < NH; ++u) {
      const float* q = t.qkv + r.row * t.stride + qoff + u * hd;
      __m512 qv[C];
      for (int c = 0; c < C; ++c) qv[c] = _mm512_loadu_ps(q + c * kLanes);
      __m512 part[kLanes];
      for (int j = 0; j < kLanes; ++j) {
        const T* k = krow[j] + t.KvOffset(h + u);
        part[j] = _mm512_mul_ps(qv[0], Load16(k));
        for (int c = 1; c < C; ++c)
          part[j] = _mm512_fmadd_ps(qv[c], Load16(k + c * kLanes), part[j]);
      }
      const __m512 sc = _mm512_mask_mov_ps(_mm512_set1_ps(kNegInf), valid,
                                           _mm512_mul_ps(HalvingSums16(part), scale));
      const int64_t x = static_cast<int64_t>(i) * st.nh + h + u;
      const float m_new = std::max(st.m[x], _mm512_reduce_max_ps(sc));
      const float cr = ExpNonPositive(st.m[x] - m_new);
      const __m512 p = Exp16(_mm512_sub_ps(sc, _mm512_set1_ps(m_new)));  // -inf lanes give 0
      st.l[x] = std::fma(st.l[x], cr, HalvingSum16(p));
      st.m[x] = m_new;
      _mm512_store_ps(pj[u], p);
      a[u] = st.acc + x * hd;
      const __m512 cv = _mm512_set1_ps(cr);
      for (int c = 0; c < C; ++c) av[u][c] = _mm512_mul_ps(_mm512_loadu_ps(a[u] + c * kLanes), cv);
    }
    for (int j = 0; j < keys; ++j) {
      for (int u = 0; u < NH; ++u) {
        const __m512 pb = _mm512_set1_ps(pj[u][j]);
        const T* v = vrow[j] + t.KvOffset(h + u);
        for (int c = 0; c < C; ++c)
          av[u][c] = _mm512_fmadd_ps(pb, Load16(v + c * kLanes), av[u][c]);
      }
    }
    for (int u = 0; u < NH; ++u) {
      for (int c = 0; c < C; ++c) _mm512_storeu_ps(a[u] + c * kLanes, av[u][c]);
    }
  }
}

// Key group by key group; inside a group, the task's heads two at a time, so a task with many
// heads reads each K/V row's span of them in one pass (a decode row's heads split over the
// threads in a few wide slices).
template <typename T, int C>
FS_AVX512 void Avx512Body(const AttendTask& t, AttendScratch* s) {
  TaskState st = StartTask(t, s);
  const T* krow[kLanes];
  const T* vrow[kLanes];
  for (int64_t t0 = 0; t0 < st.ctx_max; t0 += kLanes) {
    const int len = static_cast<int>(std::min<int64_t>(kLanes, st.ctx_max - t0));
    GroupRows<T>(t, t0, len, krow, vrow);
    int h = 0;
    if constexpr (C <= 8) {  // 2 x C accumulators: two heads at a time while they fit
      for (; h + 2 <= st.nh; h += 2) GroupHeads<T, C, 2>(t, st, t0, len, krow, vrow, h);
    }
    for (; h < st.nh; ++h) GroupHeads<T, C, 1>(t, st, t0, len, krow, vrow, h);
  }
  FinishTask(t, st);
}

#undef FS_AVX512
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace

void AttendTileScalar(const AttendTask& t, AttendScratch* s) {
  if (t.kv->dtype == KvDtype::kBf16) {
    ScalarBody<uint16_t>(t, s);
  } else {
    ScalarBody<float>(t, s);
  }
}

bool AttendSimdFits(int hd) { return hd > 0 && hd % kLanes == 0 && hd <= kSimdMaxHeadDim; }

void AttendTileAvx512(const AttendTask& t, AttendScratch* s) {
  attend_internal::DispatchTypeAndChunks(t, [&]<typename T, int C>() { Avx512Body<T, C>(t, s); });
}

}  // namespace flatstate::cpu
