// The bf16-weight CPU GEMM (kernels/gemm.h, WeightDtype::kBf16): the fp32 chain
// acc = fma(x[i][kk], float(wb[j][kk]), acc) over kk in order, on weights stored as bf16.
//
// Widening a bf16 to fp32 is exact (its 16 bits become the float's top half), so every body
// computes the same fma chain as the scalar definition, bit for bit. The panel keeps two
// consecutive k of a column in one 32-bit lane (kk even in the low half, odd in the high half):
// one 512-bit load then gives 16 columns at two k, widened by a shift (even) and a mask (odd),
// two cheap integer ops per 16 weights. AVX-512: the fp32 bodies' register tiling (cpu/gemm.cc),
// MR = 6 rows x 64 columns, widening in the loop. AVX2, where the widening ops would share the
// two FMA ports: each tile's panel is widened once into an f32 panel (WidenPanelAvx2) and the
// fp32 AVX2 rows (F32RowsAvx2Cached) run on it. Up to kStreamMaxRows rows both stream instead
// (cpu/gemm_stream.cc).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "kernels/cpu/gemm_internal.h"
#include "kernels/gemm.h"

namespace flatstate {

namespace cpu {
namespace {

// ---- Scalar body: the definition every other body must equal bit for bit. ----
template <int MR>
void BlockScalar(const float* x, int64_t ldx, const uint16_t* p, int64_t k, float* y, int64_t ldy,
                 int64_t cols, bool accumulate) {
  alignas(64) float acc[MR * kP] = {};
  for (int64_t kk = 0; kk < k; ++kk) {
    const uint16_t* wk = p + (kk / 2) * 2 * kP + (kk & 1);
    for (int i = 0; i < MR; ++i) {
      const float xv = x[i * ldx + kk];
      float* a = acc + i * kP;
      for (int64_t j = 0; j < kP; ++j) a[j] = std::fma(xv, FloatFromBf16(wk[2 * j]), a[j]);
    }
  }
  Store<MR>(acc, y, ldy, cols, accumulate);
}

// ---- AVX-512F body. ----
template <int MR>
__attribute__((target("avx512f"))) inline void FmaRows(const float* x, int64_t ldx, int64_t kk,
                                                       const __m512 (&w)[4], __m512 (&acc)[MR][4]) {
  for (int i = 0; i < MR; ++i) {
    const __m512 xb = _mm512_set1_ps(x[i * ldx + kk]);
    for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_fmadd_ps(xb, w[v], acc[i][v]);
  }
}

// MR rows (cpu::PanelRowsAvx512 walks a panel's rows with it).
struct Bf16Avx512 {
  template <int MR>
  __attribute__((target("avx512f"))) static void Block(const float* x, int64_t ldx,
                                                       const uint16_t* p, int64_t k, float* y,
                                                       int64_t ldy, int64_t cols, bool accumulate,
                                                       SpreadPrefetch* pf) {
    __m512 acc[MR][4];
    for (int i = 0; i < MR; ++i) {
      for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_setzero_ps();
    }
    const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
    int64_t kk = 0;
    __m512 w[4];
    for (; kk + 2 <= k; kk += 2) {
      const __m512i* wk = reinterpret_cast<const __m512i*>(p + kk * kP);
      PrefetchPanel<MR>(wk, 4 * 64);
      pf->Step();
      pf->Step();
      for (int v = 0; v < 4; ++v) {
        w[v] = LowHalf(_mm512_load_si512(wk + v));
      }
      FmaRows<MR>(x, ldx, kk, w, acc);
      for (int v = 0; v < 4; ++v) {
        w[v] = _mm512_castsi512_ps(_mm512_and_si512(_mm512_load_si512(wk + v), high));
      }
      FmaRows<MR>(x, ldx, kk + 1, w, acc);
    }
    if (kk < k) {  // odd k: the last pair's low half only
      const __m512i* wk = reinterpret_cast<const __m512i*>(p + kk * kP);
      for (int v = 0; v < 4; ++v) {
        w[v] = LowHalf(_mm512_load_si512(wk + v));
      }
      FmaRows<MR>(x, ldx, kk, w, acc);
    }
    StoreZmm<MR>(acc, y, ldy, cols, accumulate);
  }
};

void RowsAvx512(const float* x, int64_t k, int64_t r0, int64_t r1, const uint16_t* panel, float* y,
                int64_t ldy, int64_t cols, bool accumulate) {
  PanelRowsAvx512<Bf16Avx512>(x, k, r0, r1, panel,
                              static_cast<int64_t>(PackedWeight::PanelBytes(WeightDtype::kBf16, k)),
                              y, ldy, cols, accumulate);
}

using BlockFn = void (*)(const float*, int64_t, const uint16_t*, int64_t, float*, int64_t, int64_t,
                         bool);

// Rows [r0, r1) of one panel, in blocks of kMr rows (the tail one row at a time).
template <int kMr, BlockFn kBlock, BlockFn kOne>
void RunRows(const float* x, int64_t k, int64_t r0, int64_t r1, const uint16_t* panel, float* y,
             int64_t ldy, int64_t cols, bool accumulate) {
  int64_t r = r0;
  for (; r + kMr <= r1; r += kMr) {
    kBlock(x + r * k, k, panel, k, y + r * ldy, ldy, cols, accumulate);
  }
  for (; r < r1; ++r) kOne(x + r * k, k, panel, k, y + r * ldy, ldy, cols, accumulate);
}

using RowsFn = void (*)(const float*, int64_t, int64_t, int64_t, const uint16_t*, float*, int64_t,
                        int64_t, bool);

RowsFn RowsFor(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kAvx512:
      return &RowsAvx512;
    case GemmIsa::kAvx2:  // GemmBf16 widens the panel and runs the f32 AVX2 rows
    case GemmIsa::kScalar:
      break;
  }
  return &RunRows<4, &BlockScalar<4>, &BlockScalar<1>>;
}

// Stores 8 widened weights, flushed first when asked (WidenPanelAvx2).
__attribute__((target("avx2"))) inline void StoreWidened(float* at, __m256i bits,
                                                         bool flush_subnormals) {
  const __m256 v = _mm256_castsi256_ps(bits);
  _mm256_store_ps(at, flush_subnormals ? FlushAvx2(v) : v);
}

}  // namespace

// Widening once per tile of up to 96 rows instead of once per 6 rows inside the body keeps the
// FMA ports to the FMAs (the widening shifts and masks share them on AVX2). Same values, so the
// same chains and bits.
__attribute__((target("avx2"))) void WidenPanelAvx2(const uint16_t* p, int64_t k,
                                                    bool flush_subnormals, float* out) {
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int64_t kk = 0; kk < k; kk += 2) {
    const uint16_t* src = p + kk * kP;
    float* even = out + kk * kP;
    for (int v = 0; v < 8; ++v) {
      const __m256i raw = _mm256_load_si256(reinterpret_cast<const __m256i*>(src + 16 * v));
      StoreWidened(even + 8 * v, _mm256_slli_epi32(raw, 16), flush_subnormals);
      StoreWidened(even + kP + 8 * v, _mm256_and_si256(raw, high), flush_subnormals);
    }
  }
}

float* WidePanelBuffer(int64_t k) {
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  thread_local std::unique_ptr<float, Free> buf;
  thread_local int64_t held = 0;
  if (k > held) {
    const size_t bytes = static_cast<size_t>((k + 1) / 2 * 2) * kP * sizeof(float);
    buf.reset(static_cast<float*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
    if (buf == nullptr) throw std::bad_alloc();
    held = k;
  }
  return buf.get();
}

namespace {

// The kBf16 panels of an [n, k] weight whose element i is bits(i), a bf16.
template <typename Bits>
void PackPanels(int64_t n, int64_t k, uint8_t* out, const Bits& bits) {
  const int64_t panels = (n + kP - 1) / kP;
  const size_t panel_bytes = PackedWeight::PanelBytes(WeightDtype::kBf16, k);
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t c0 = p * kP, cols = std::min(kP, n - c0);
    uint16_t* dst = reinterpret_cast<uint16_t*>(out + p * panel_bytes);
    for (int64_t t = 0; t < (k + 1) / 2; ++t) {
      uint16_t* row = dst + t * 2 * kP;
      for (int64_t j = 0; j < kP; ++j) {
        for (int64_t h = 0; h < 2; ++h) {
          const int64_t kk = 2 * t + h;
          row[2 * j + h] = j < cols && kk < k ? bits((c0 + j) * k + kk) : uint16_t{0};
        }
      }
    }
  }
}

}  // namespace

void PackBf16(const float* w, int64_t n, int64_t k, uint8_t* out) {
  PackPanels(n, k, out, [w](int64_t i) { return Bf16FromFloat(w[i]); });
}

void PackBf16Bits(const uint16_t* wb, int64_t n, int64_t k, uint8_t* out) {
  PackPanels(n, k, out, [wb](int64_t i) { return wb[i]; });
}

void GemmBf16(const float* x, int64_t m, const PackedWeight& w, float* y, bool accumulate,
              const Parallel& par, GemmIsa isa) {
  const int64_t n = w.n(), k = w.k();
  if (m <= kStreamMaxRows && isa != GemmIsa::kScalar) {
    return GemmStreamBf16(x, m, w, y, accumulate, par, isa);
  }
  if (isa == GemmIsa::kAvx2) {
    ForTiles(m, w.panels(), static_cast<double>(m) * n * k, par,
             [&](int64_t r0, int64_t r1, int64_t p) {
               const int64_t c0 = p * kP;
               float* wide = WidePanelBuffer(k);
               WidenPanelAvx2(reinterpret_cast<const uint16_t*>(w.panel_data(p)), k,
                              /*flush_subnormals=*/false, wide);
               F32RowsAvx2Cached(x, k, r0, r1, wide, y + c0, n, std::min(kP, n - c0), accumulate);
             });
    return;
  }
  const RowsFn rows = RowsFor(isa);
  ForTiles(m, w.panels(), static_cast<double>(m) * n * k, par,
           [&](int64_t r0, int64_t r1, int64_t p) {
             const int64_t c0 = p * kP;
             rows(x, k, r0, r1, reinterpret_cast<const uint16_t*>(w.panel_data(p)), y + c0, n,
                  std::min(kP, n - c0), accumulate);
           });
}

}  // namespace cpu
}  // namespace flatstate
