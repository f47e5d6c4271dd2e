// The int8-weight CPU GEMM (kernels/gemm.h, WeightDtype::kInt8): per block b of 32 along k,
// acc = fma(float(isum_b), sx[i][b] * sw[j][b], acc), where isum_b is the exact integer dot
// product of the row's and the column's int8 quants over the block.
//
// The call first quantises each row of x per block (QuantizeBlockInt8: the row alone decides
// it, so a row's result cannot depend on its batch), then walks the tiles. Integer sums are
// exact whichever instructions add them, and the float steps are the same three operations in
// every body, so all bodies give the definition's bits:
//   AVX512-VNNI  vpdpbusd adds 4 products (unsigned weight byte qw + 128 times signed activation
//                byte) per 32-bit lane; the accumulator starts at -128 * sum(qx), which takes the
//                +128 back out exactly. MR = 3 rows x 64 columns (12 integer + 12 float zmm).
//   AVX2         vpmaddubsw(|qx|, qw with qx's sign) then vpmaddwd: each pair sum is at most
//                2 * 127 * 127, so the 16-bit step never saturates. One row x 32 columns.
//   scalar       the definition.
// Why not dequantise to fp32 in registers and keep the fp32 fma chain: that spends 4 conversion
// ops per 16 weights plus an fma per row, where vpdpbusd does 64 multiply-adds in one op; batch-1
// decode is bandwidth-bound either way, prefill is not (docs/benchmarks.md has the numbers).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/gemm_internal.h"
#include "kernels/gemm.h"

namespace flatstate {

namespace {
constexpr int64_t kB = PackedWeight::kInt8Block;
}  // namespace

namespace cpu {
namespace {

constexpr int64_t kGroupBytes = kP * 4;  // 4 k of 64 columns

// ---- Scalar body: the definition every other body must equal bit for bit. ----
void RowScalar(const QuantRows& xq, int64_t r, const uint8_t* panel, float* y, int64_t cols,
               bool accumulate) {
  alignas(64) float acc[kP] = {};
  for (int64_t b = 0; b < xq.nb; ++b) {
    const uint8_t* blk = panel + b * PackedWeight::kInt8BlockBytes;
    const float* sw = reinterpret_cast<const float*>(blk + 8 * kGroupBytes);
    const int8_t* qx = xq.q.data() + (r * xq.nb + b) * kB;
    const float sx = xq.s[r * xq.nb + b];
    for (int64_t j = 0; j < kP; ++j) {
      int32_t isum = 0;
      for (int64_t t = 0; t < kB; ++t) {
        const int32_t qw = static_cast<int32_t>(blk[(t / 4) * kGroupBytes + j * 4 + t % 4]) - 128;
        isum += qw * qx[t];
      }
      acc[j] = std::fma(static_cast<float>(isum), sx * sw[j], acc[j]);
    }
  }
  Store<1>(acc, y, 0, cols, accumulate);
}

// ---- AVX512-VNNI body. ----
// Rows per register tile; GEMMs of fewer rows stream panels instead (BlockVnniStream).
constexpr int kVnniRows = 3;
template <int MR>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void BlockVnni(
    const QuantRows& xq, int64_t r, const uint8_t* panel, float* y, int64_t ldy, int64_t cols,
    bool accumulate) {
  const int64_t nb = xq.nb;
  __m512 acc[MR][4];
  for (int i = 0; i < MR; ++i) {
    for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = panel + b * PackedWeight::kInt8BlockBytes;
    PrefetchPanel<MR>(blk, PackedWeight::kInt8BlockBytes);
    __m512i isum[MR][4];
    for (int i = 0; i < MR; ++i) {
      // -128 * sum(qx) takes the weights' +128 back out of vpdpbusd's sum, exactly.
      const __m512i init = _mm512_set1_epi32(-128 * xq.sum[(r + i) * nb + b]);
      for (int v = 0; v < 4; ++v) isum[i][v] = init;
    }
    for (int g = 0; g < 8; ++g) {
      const __m512i* wg = reinterpret_cast<const __m512i*>(blk + g * kGroupBytes);
      const __m512i w0 = _mm512_load_si512(wg), w1 = _mm512_load_si512(wg + 1);
      const __m512i w2 = _mm512_load_si512(wg + 2), w3 = _mm512_load_si512(wg + 3);
      for (int i = 0; i < MR; ++i) {
        int32_t quad;
        std::memcpy(&quad, xq.q.data() + ((r + i) * nb + b) * kB + 4 * g, sizeof(quad));
        const __m512i xb = _mm512_set1_epi32(quad);
        isum[i][0] = _mm512_dpbusd_epi32(isum[i][0], w0, xb);
        isum[i][1] = _mm512_dpbusd_epi32(isum[i][1], w1, xb);
        isum[i][2] = _mm512_dpbusd_epi32(isum[i][2], w2, xb);
        isum[i][3] = _mm512_dpbusd_epi32(isum[i][3], w3, xb);
      }
    }
    const float* sw = reinterpret_cast<const float*>(blk + 8 * kGroupBytes);
    for (int i = 0; i < MR; ++i) {
      const __m512 sx = _mm512_set1_ps(xq.s[(r + i) * nb + b]);
      for (int v = 0; v < 4; ++v) {
        const __m512 scale = _mm512_mul_ps(sx, _mm512_load_ps(sw + 16 * v));
        // Zero-masked over all lanes: the plain conversion's undefined-value source trips GCC
        // 12's -Wmaybe-uninitialized. Same result (exact: |isum| < 2^24).
        const __m512 fsum = _mm512_maskz_cvtepi32_ps(0xFFFF, isum[i][v]);
        acc[i][v] = _mm512_fmadd_ps(fsum, scale, acc[i][v]);
      }
    }
  }
  StoreZmm<MR>(acc, y, ldy, cols, accumulate);
}

// One row's block i against one panel block, all 64 columns, acc in memory (GemmStreamQ, for
// fewer rows than BlockVnni's tile): the same operations as BlockVnni<1>, prefetching the panel's
// next block as it reads this one.
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void BlockVnniStream(const QuantRows& xq,
                                                                            int64_t i,
                                                                            const uint8_t* blk,
                                                                            float* acc) {
  const __m512i init = _mm512_set1_epi32(-128 * xq.sum[i]);
  __m512i isum[4] = {init, init, init, init};
  const int8_t* qx = xq.q.data() + i * kB;
  for (int g = 0; g < 8; ++g) {
    const uint8_t* wg = blk + g * kGroupBytes;
    for (int l = 0; l < 4; ++l) {
      _mm_prefetch(reinterpret_cast<const char*>(wg) + PackedWeight::kInt8BlockBytes + 64 * l,
                   _MM_HINT_T0);
    }
    int32_t quad;
    std::memcpy(&quad, qx + 4 * g, sizeof(quad));
    const __m512i xb = _mm512_set1_epi32(quad);
    for (int v = 0; v < 4; ++v) {
      const __m512i wv = _mm512_load_si512(reinterpret_cast<const __m512i*>(wg) + v);
      isum[v] = _mm512_dpbusd_epi32(isum[v], wv, xb);
    }
  }
  const float* sw = reinterpret_cast<const float*>(blk + 8 * kGroupBytes);
  for (int l = 0; l < 4; ++l) {
    _mm_prefetch(reinterpret_cast<const char*>(sw) + PackedWeight::kInt8BlockBytes + 64 * l,
                 _MM_HINT_T0);
  }
  const __m512 sx = _mm512_set1_ps(xq.s[i]);
  for (int v = 0; v < 4; ++v) {
    const __m512 scale = _mm512_mul_ps(sx, _mm512_load_ps(sw + 16 * v));
    const __m512 fsum = _mm512_maskz_cvtepi32_ps(0xFFFF, isum[v]);
    _mm512_store_ps(acc + 16 * v, _mm512_fmadd_ps(fsum, scale, _mm512_load_ps(acc + 16 * v)));
  }
}

// ---- AVX2 body: one row over the whole panel, each block front to back. ----
// Block i of xq's rows against one panel block, all 64 columns: acc[j] += float(isum[j]) *
// (sx * sw[j]), for cpu::GemmStreamQ.
__attribute__((target("avx2,fma"))) void BlockAvx2(const QuantRows& xq, int64_t i,
                                                   const uint8_t* blk, float* acc) {
  const int8_t* qx = xq.q.data() + i * kB;
  const __m256 sx = _mm256_set1_ps(xq.s[i]);
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i isum[8];
  for (__m256i& s : isum) s = _mm256_setzero_si256();
  for (int g = 0; g < 8; ++g) {
    int32_t quad;
    std::memcpy(&quad, qx + 4 * g, sizeof(quad));
    const __m256i xb = _mm256_set1_epi32(quad);
    const __m256i ax = _mm256_abs_epi8(xb);
    const uint8_t* wg = blk + g * kGroupBytes;
    for (int l = 0; l < 4; ++l) {
      _mm_prefetch(reinterpret_cast<const char*>(wg) + PackedWeight::kInt8BlockBytes + 64 * l,
                   _MM_HINT_T0);
    }
    for (int v = 0; v < 8; ++v) {
      const __m256i raw = _mm256_load_si256(reinterpret_cast<const __m256i*>(wg + 32 * v));
      const __m256i sw = _mm256_sign_epi8(_mm256_xor_si256(raw, flip), xb);
      const __m256i pairs = _mm256_maddubs_epi16(ax, sw);
      isum[v] = _mm256_add_epi32(isum[v], _mm256_madd_epi16(pairs, ones));
    }
  }
  const float* sw = reinterpret_cast<const float*>(blk + 8 * kGroupBytes);
  for (int l = 0; l < 4; ++l) {
    _mm_prefetch(reinterpret_cast<const char*>(sw) + PackedWeight::kInt8BlockBytes + 64 * l,
                 _MM_HINT_T0);
  }
  for (int v = 0; v < 8; ++v) {
    const __m256 scale = _mm256_mul_ps(sx, _mm256_load_ps(sw + 8 * v));
    const __m256 a = _mm256_load_ps(acc + 8 * v);
    _mm256_store_ps(acc + 8 * v, _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[v]), scale, a));
  }
}

using RowsFn = void (*)(const QuantRows&, int64_t, int64_t, const uint8_t*, float*, int64_t,
                        int64_t, bool);

template <void (*kRow)(const QuantRows&, int64_t, const uint8_t*, float*, int64_t, bool)>
void RunRowByRow(const QuantRows& xq, int64_t r0, int64_t r1, const uint8_t* panel, float* y,
                 int64_t ldy, int64_t cols, bool accumulate) {
  for (int64_t r = r0; r < r1; ++r) kRow(xq, r, panel, y + r * ldy, cols, accumulate);
}

void RunVnni(const QuantRows& xq, int64_t r0, int64_t r1, const uint8_t* panel, float* y,
             int64_t ldy, int64_t cols, bool accumulate) {
  constexpr int kMr = kVnniRows;
  int64_t r = r0;
  for (; r + kMr <= r1; r += kMr) BlockVnni<kMr>(xq, r, panel, y + r * ldy, ldy, cols, accumulate);
  for (; r < r1; ++r) BlockVnni<1>(xq, r, panel, y + r * ldy, ldy, cols, accumulate);
}

RowsFn RowsFor(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kAvx512:
      return &RunVnni;  // GemmInt8 runs the AVX2 body on a CPU without VNNI
    case GemmIsa::kAvx2:
    case GemmIsa::kScalar:
      break;
  }
  return &RunRowByRow<&RowScalar>;
}

}  // namespace

bool HasInt8Vnni() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vnni");
  return has;
}

void PackInt8(const float* w, int64_t n, int64_t k, uint8_t* out) {
  const int64_t panels = (n + kP - 1) / kP, nb = (k + kB - 1) / kB;
  int8_t q[kB];
  for (int64_t p = 0; p < panels; ++p) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* blk = out + (p * nb + b) * PackedWeight::kInt8BlockBytes;
      float* scales = reinterpret_cast<float*>(blk + 8 * kGroupBytes);
      for (int64_t j = 0; j < kP; ++j) {
        const int64_t c = p * kP + j;
        scales[j] = 0.f;
        std::memset(q, 0, sizeof(q));
        if (c < n) scales[j] = QuantizeBlockInt8(w + c * k + b * kB, std::min(kB, k - b * kB), q);
        for (int64_t t = 0; t < kB; ++t) {
          blk[(t / 4) * kGroupBytes + j * 4 + t % 4] = static_cast<uint8_t>(q[t] + 128);
        }
      }
    }
  }
}

void GemmInt8(const float* x, int64_t m, const PackedWeight& w, float* y, bool accumulate,
              const Parallel& par, GemmIsa isa) {
  const int64_t n = w.n(), k = w.k();
  // The calling thread's scratch, reused across calls. A reference, so that the workers read
  // this thread's rows.
  QuantRows& xq = ThreadQuantRows();
  xq.Fill(x, m, k, par, isa);
  if (isa == GemmIsa::kAvx2 || (isa == GemmIsa::kAvx512 && !HasInt8Vnni())) {
    return GemmStreamQ<PackedWeight::kInt8BlockBytes, &BlockAvx2>(xq, m, w, y, accumulate, par);
  }
  if (isa == GemmIsa::kAvx512 && m < kVnniRows) {
    return GemmStreamQ<PackedWeight::kInt8BlockBytes, &BlockVnniStream>(xq, m, w, y, accumulate,
                                                                        par);
  }
  const RowsFn rows = RowsFor(isa);
  ForTiles(m, w.panels(), static_cast<double>(m) * n * k, par,
           [&](int64_t r0, int64_t r1, int64_t p) {
             const int64_t c0 = p * kP;
             rows(xq, r0, r1, w.panel_data(p), y + c0, n, std::min(kP, n - c0), accumulate);
           });
}

}  // namespace cpu
}  // namespace flatstate
