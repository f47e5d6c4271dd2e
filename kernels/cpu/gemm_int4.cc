// The int4-weight CPU GEMM (kernels/gemm.h, WeightDtype::kInt4): kInt8's chain, per block b of
// 32 along k acc = fma(float(isum_b), sx[i][b] * sw[j][b], acc), with 4-bit weights in [-7, 7]
// stored as unsigned nibbles qw + 8 and the activations quantised to int8 per row and block
// exactly as for kInt8 (QuantRows). Integer sums are exact, so every body gives the scalar
// definition's bits:
//   AVX512-VNNI  a 512-bit load holds 16 columns x 8 k; the low nibbles (k = 8g + t) and the high
//                ones (8g + 4 + t) are two vpdpbusd operands after a mask and a shift; the
//                accumulator starts at -8 * sum(qx), which takes the +8 back out. MR = 3 rows.
//   AVX2         nibbles to signed bytes (mask, shift, subtract 8), then vpmaddubsw(|qx|, qw with
//                qx's sign) and vpmaddwd as for kInt8. One row x 32 columns.
//   scalar       the definition.
// Why int4 is here: batch-1 decode streams every weight once per token, and at 20 bytes per 32
// weights it moves 0.56x int8's bytes (docs/benchmarks.md has the measured decode speed). Its
// error is ~18x int8's per weight; docs/model-format.md says when to use it.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/gemm_internal.h"
#include "kernels/gemm.h"

namespace flatstate::cpu {
namespace {

constexpr int64_t kB = PackedWeight::kInt8Block;
constexpr int64_t kGroupBytes = kP * 4;  // 8 k of 64 columns
constexpr size_t kScales = 4 * kGroupBytes;

// ---- Scalar body: the definition every other body must equal bit for bit. ----
void RowScalar(const QuantRows& xq, int64_t r, const uint8_t* panel, float* y, int64_t cols,
               bool accumulate) {
  alignas(64) float acc[kP] = {};
  for (int64_t b = 0; b < xq.nb; ++b) {
    const uint8_t* blk = panel + b * PackedWeight::kInt4BlockBytes;
    const float* sw = reinterpret_cast<const float*>(blk + kScales);
    const int8_t* qx = xq.q.data() + (r * xq.nb + b) * kB;
    const float sx = xq.s[r * xq.nb + b];
    for (int64_t j = 0; j < kP; ++j) {
      int32_t isum = 0;
      for (int64_t g = 0; g < 4; ++g) {
        for (int64_t t = 0; t < 4; ++t) {
          const int32_t byte = blk[g * kGroupBytes + j * 4 + t];
          isum += ((byte & 15) - 8) * qx[8 * g + t] + ((byte >> 4) - 8) * qx[8 * g + 4 + t];
        }
      }
      acc[j] = std::fma(static_cast<float>(isum), sx * sw[j], acc[j]);
    }
  }
  Store<1>(acc, y, 0, cols, accumulate);
}

// ---- AVX512-VNNI body. ----
template <int MR>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void BlockVnni(
    const QuantRows& xq, int64_t r, const uint8_t* panel, float* y, int64_t ldy, int64_t cols,
    bool accumulate) {
  const int64_t nb = xq.nb;
  const __m512i low = _mm512_set1_epi8(0x0F);
  __m512 acc[MR][4];
  for (int i = 0; i < MR; ++i) {
    for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = panel + b * PackedWeight::kInt4BlockBytes;
    PrefetchPanel<MR>(blk, PackedWeight::kInt4BlockBytes);
    __m512i isum[MR][4];
    for (int i = 0; i < MR; ++i) {
      const __m512i init = _mm512_set1_epi32(-8 * xq.sum[(r + i) * nb + b]);
      for (int v = 0; v < 4; ++v) isum[i][v] = init;
    }
    for (int g = 0; g < 4; ++g) {
      const __m512i* wg = reinterpret_cast<const __m512i*>(blk + g * kGroupBytes);
      for (int half = 0; half < 2; ++half) {  // low nibbles: k = 8g + t; high: 8g + 4 + t
        __m512i w[4];
        for (int v = 0; v < 4; ++v) {
          const __m512i raw = _mm512_load_si512(wg + v);
          // Zero-masked over all lanes: the plain shift's undefined-value source trips GCC 12's
          // -Wmaybe-uninitialized. Same result.
          w[v] = _mm512_and_si512(half == 0 ? raw : _mm512_maskz_srli_epi16(~0u, raw, 4), low);
        }
        for (int i = 0; i < MR; ++i) {
          int32_t quad;
          std::memcpy(&quad, xq.q.data() + ((r + i) * nb + b) * kB + 8 * g + 4 * half,
                      sizeof(quad));
          const __m512i xb = _mm512_set1_epi32(quad);
          for (int v = 0; v < 4; ++v) isum[i][v] = _mm512_dpbusd_epi32(isum[i][v], w[v], xb);
        }
      }
    }
    const float* sw = reinterpret_cast<const float*>(blk + kScales);
    for (int i = 0; i < MR; ++i) {
      const __m512 sx = _mm512_set1_ps(xq.s[(r + i) * nb + b]);
      for (int v = 0; v < 4; ++v) {
        const __m512 scale = _mm512_mul_ps(sx, _mm512_load_ps(sw + 16 * v));
        const __m512 fsum = _mm512_maskz_cvtepi32_ps(0xFFFF, isum[i][v]);  // exact
        acc[i][v] = _mm512_fmadd_ps(fsum, scale, acc[i][v]);
      }
    }
  }
  StoreZmm<MR>(acc, y, ldy, cols, accumulate);
}

// ---- AVX2 body: one row over the whole panel, each block front to back. ----
// Block i of xq's rows against one panel block, all 64 columns: acc[j] += float(isum[j]) *
// (sx * sw[j]), for cpu::GemmStreamQ.
__attribute__((target("avx2,fma"))) void BlockAvx2(const QuantRows& xq, int64_t i,
                                                   const uint8_t* blk, float* acc) {
  const int8_t* qx = xq.q.data() + i * kB;
  const __m256 sx = _mm256_set1_ps(xq.s[i]);
  const __m256i low = _mm256_set1_epi8(0x0F), eight = _mm256_set1_epi8(8);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i isum[8];
  for (__m256i& s : isum) s = _mm256_setzero_si256();
  for (int g = 0; g < 4; ++g) {
    int32_t qa, qb;
    std::memcpy(&qa, qx + 8 * g, sizeof(qa));
    std::memcpy(&qb, qx + 8 * g + 4, sizeof(qb));
    const __m256i xa = _mm256_set1_epi32(qa), xb = _mm256_set1_epi32(qb);
    const __m256i ax = _mm256_abs_epi8(xa), bx = _mm256_abs_epi8(xb);
    const uint8_t* wg = blk + g * kGroupBytes;
    for (int l = 0; l < 4; ++l) {
      _mm_prefetch(reinterpret_cast<const char*>(wg) + PackedWeight::kInt4BlockBytes + 64 * l,
                   _MM_HINT_T0);
    }
    for (int v = 0; v < 8; ++v) {
      const __m256i raw = _mm256_load_si256(reinterpret_cast<const __m256i*>(wg + 32 * v));
      const __m256i lo = _mm256_sub_epi8(_mm256_and_si256(raw, low), eight);
      const __m256i hi = _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(raw, 4), low), eight);
      const __m256i pa = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(lo, xa));
      const __m256i pb = _mm256_maddubs_epi16(bx, _mm256_sign_epi8(hi, xb));
      isum[v] = _mm256_add_epi32(isum[v], _mm256_madd_epi16(pa, ones));
      isum[v] = _mm256_add_epi32(isum[v], _mm256_madd_epi16(pb, ones));
    }
  }
  const float* sw = reinterpret_cast<const float*>(blk + kScales);
  for (int l = 0; l < 4; ++l) {
    _mm_prefetch(reinterpret_cast<const char*>(sw) + PackedWeight::kInt4BlockBytes + 64 * l,
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
  constexpr int kMr = 3;
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

void PackInt4(const float* w, int64_t n, int64_t k, uint8_t* out) {
  const int64_t panels = (n + kP - 1) / kP, nb = (k + kB - 1) / kB;
  int8_t q[kB];
  for (int64_t p = 0; p < panels; ++p) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* blk = out + (p * nb + b) * PackedWeight::kInt4BlockBytes;
      float* scales = reinterpret_cast<float*>(blk + kScales);
      for (int64_t j = 0; j < kP; ++j) {
        const int64_t c = p * kP + j;
        scales[j] = 0.f;
        std::memset(q, 0, sizeof(q));
        if (c < n) scales[j] = QuantizeBlockInt4(w + c * k + b * kB, std::min(kB, k - b * kB), q);
        for (int64_t g = 0; g < 4; ++g) {
          for (int64_t t = 0; t < 4; ++t) {
            blk[g * kGroupBytes + j * 4 + t] =
                static_cast<uint8_t>((q[8 * g + t] + 8) | ((q[8 * g + 4 + t] + 8) << 4));
          }
        }
      }
    }
  }
}

void GemmInt4(const float* x, int64_t m, const PackedWeight& w, float* y, bool accumulate,
              const Parallel& par, GemmIsa isa) {
  const int64_t n = w.n(), k = w.k();
  QuantRows& xq = ThreadQuantRows();  // a reference: the workers read this thread's rows
  xq.Fill(x, m, k, par, isa);
  if (isa == GemmIsa::kAvx2 || (isa == GemmIsa::kAvx512 && !HasInt8Vnni())) {
    return GemmStreamQ<PackedWeight::kInt4BlockBytes, &BlockAvx2>(xq, m, w, y, accumulate, par);
  }
  const RowsFn rows = RowsFor(isa);
  ForTiles(m, w.panels(), static_cast<double>(m) * n * k, par,
           [&](int64_t r0, int64_t r1, int64_t p) {
             const int64_t c0 = p * kP;
             rows(xq, r0, r1, w.panel_data(p), y + c0, n, std::min(kP, n - c0), accumulate);
           });
}

}  // namespace flatstate::cpu
