// The bf16 dot-product CPU GEMM (kernels/gemm.h, WeightDtype::kBf16Dot): bf16 weights times the
// activations rounded to bf16, two products per step, in the order AVX512-BF16's vdpbf16ps adds
// them, so that instruction is the fast body and the others emulate it bit for bit.
//
// The chain of one output element (the scalar body below is its definition): the row is rounded
// to bf16 once per call (nearest-even, Bf16FromFloat), then for each pair t of k
//   acc = F(fma(F(xb[2t+1]), F(wb[2t+1]), acc));  acc = F(fma(F(xb[2t]), F(wb[2t]), acc))
// in fp32, where F flushes a subnormal value to a zero of its sign: vdpbf16ps treats subnormal
// inputs as zero, adds each exact product to the accumulator with one rounding (the odd pair
// first) and flushes a subnormal sum. Checked against the instruction on 1.5 M random operands
// across the whole range and 2 M around 2^-126, all equal (docs/data/zen5-2026-11-28d/
// dpbf16_fma_probe.cc); the product is not flushed on its own (a subnormal product still adds).
// An odd k's last pair has zero high halves on both sides and is computed like any other.
//
// The rounded row sits in a buffer with a row stride of k 32-bit words (one word per pair; the
// first ceil(k / 2) are used), so the shared panel walk (cpu::PanelRowsAvx512, which steps rows
// by k) serves the AVX512-BF16 body unchanged, and so does the streamed small-batch walk
// (cpu/gemm_stream.cc, up to kStreamMaxRows rows). Bodies: AVX512-BF16 (6 x 64 tiles, or streamed
// panels, vdpbf16ps on the kBf16 panel as stored: its k pairs per 32-bit lane are the
// instruction's operand layout);
// AVX2 / AVX-512F without BF16: each tile's panel widened to fp32 with subnormals flushed, then
// one row at a time with explicit flushes; scalar.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "kernels/bf16.h"
#include "kernels/cpu/gemm_internal.h"
#include "kernels/gemm.h"

namespace flatstate::cpu {
namespace {

// F above on one bf16's bits: a subnormal (exponent 0) becomes a zero of its sign.
inline uint16_t FlushBf16(uint16_t b) { return (b & 0x7F80) == 0 ? (b & 0x8000) : b; }

// F above on an fp32 value.
inline float Flush(float v) {
  return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.f, v) : v;
}

// Rows [0, m) of x [m, k] rounded to bf16 and flushed into out: row i's k bf16 values (a zero
// after an odd k) start at uint32 word i * k.
void RoundRowsScalar(const float* x, int64_t m, int64_t k, uint32_t* out) {
  for (int64_t i = 0; i < m; ++i) {
    uint16_t* row = reinterpret_cast<uint16_t*>(out + i * k);
    for (int64_t kk = 0; kk < k; ++kk) row[kk] = FlushBf16(Bf16FromFloat(x[i * k + kk]));
    if (k % 2 != 0) row[k] = 0;
  }
}

// The same, 16 values at a time (Bf16FromFloat's integer rounding and NaN rule; AVX-512F/BW/VL,
// which every AVX512-BF16 CPU has).
__attribute__((target("avx512f,avx512bw,avx512vl"))) void RoundRowsAvx512(const float* x, int64_t m,
                                                                          int64_t k,
                                                                          uint32_t* out) {
  const __m512i round = _mm512_set1_epi32(0x7FFF), one = _mm512_set1_epi32(1);
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
  const __m512i quiet = _mm512_set1_epi32(0x40), exp_mask = _mm512_set1_epi32(0x7F80);
  const __m512i sign = _mm512_set1_epi32(0x8000);
  for (int64_t i = 0; i < m; ++i) {
    uint16_t* row = reinterpret_cast<uint16_t*>(out + i * k);
    const float* src = x + i * k;
    int64_t kk = 0;
    for (; kk < k; kk += 16) {
      const __mmask16 live =
          k - kk >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (k - kk)) - 1);
      const __m512i u = _mm512_maskz_loadu_epi32(live, src + kk);
      // Zero-masked forms, all lanes (GCC 12's -Wmaybe-uninitialized on the plain ones).
      const __m512i hi = _mm512_maskz_srli_epi32(0xFFFF, u, 16);
      __m512i r = _mm512_maskz_srli_epi32(
          0xFFFF, _mm512_add_epi32(u, _mm512_add_epi32(round, _mm512_and_si512(hi, one))), 16);
      const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
      r = _mm512_mask_or_epi32(r, nan, hi, quiet);
      const __mmask16 tiny =
          _mm512_cmpeq_epi32_mask(_mm512_and_si512(r, exp_mask), _mm512_setzero_si512());
      r = _mm512_mask_and_epi32(r, tiny, r, sign);
      _mm256_mask_storeu_epi16(row + kk, live, _mm512_maskz_cvtepi32_epi16(0xFFFF, r));
    }
    if (k % 2 != 0) row[k] = 0;
  }
}

// ---- Scalar body: the definition every other body must equal bit for bit. ----
// MR rows; xp rows of pairs at stride ldx words, panel p (kBf16 layout).
template <int MR>
void BlockScalar(const uint32_t* xp, int64_t ldx, const uint16_t* p, int64_t k, float* y,
                 int64_t ldy, int64_t cols, bool accumulate) {
  alignas(64) float acc[MR * kP] = {};
  for (int64_t t = 0; t < (k + 1) / 2; ++t) {
    const uint16_t* wt = p + t * 2 * kP;
    for (int i = 0; i < MR; ++i) {
      const uint16_t* xt = reinterpret_cast<const uint16_t*>(xp + i * ldx + t);
      const float x_even = FloatFromBf16(xt[0]), x_odd = FloatFromBf16(xt[1]);
      float* a = acc + i * kP;
      for (int64_t j = 0; j < kP; ++j) {
        const float w_even = FloatFromBf16(FlushBf16(wt[2 * j]));
        const float w_odd = FloatFromBf16(FlushBf16(wt[2 * j + 1]));
        a[j] = Flush(std::fma(x_odd, w_odd, a[j]));
        a[j] = Flush(std::fma(x_even, w_even, a[j]));
      }
    }
  }
  Store<MR>(acc, y, ldy, cols, accumulate);
}

// ---- AVX512-BF16 body. ----
// MR rows (cpu::PanelRowsAvx512 walks a panel's rows with it; `x` is the pair buffer).
struct DotAvx512 {
  template <int MR>
  __attribute__((target("avx512f,avx512bf16"))) static void Block(const float* x, int64_t ldx,
                                                                  const uint16_t* p, int64_t k,
                                                                  float* y, int64_t ldy,
                                                                  int64_t cols, bool accumulate,
                                                                  SpreadPrefetch* pf) {
    const uint32_t* xp = reinterpret_cast<const uint32_t*>(x);
    __m512 acc[MR][4];
    for (int i = 0; i < MR; ++i) {
      for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_setzero_ps();
    }
    for (int64_t t = 0; t < (k + 1) / 2; ++t) {
      const __m512i* wt = reinterpret_cast<const __m512i*>(p + t * 2 * kP);
      PrefetchPanel<MR>(wt, 4 * 64);
      pf->Step();
      pf->Step();
      __m512i w[4];
      for (int v = 0; v < 4; ++v) w[v] = _mm512_load_si512(wt + v);
      for (int i = 0; i < MR; ++i) {
        const __m512i xb = _mm512_set1_epi32(static_cast<int>(xp[i * ldx + t]));
        for (int v = 0; v < 4; ++v) {
          acc[i][v] = _mm512_dpbf16_ps(acc[i][v], reinterpret_cast<__m512bh>(xb),
                                       reinterpret_cast<__m512bh>(w[v]));
        }
      }
    }
    StoreZmm<MR>(acc, y, ldy, cols, accumulate);
  }
};

// ---- AVX2 body (also AVX-512F without BF16). ----
// One row against a widened panel (2 * ceil(k / 2) rows of 64 floats).
__attribute__((target("avx2,fma"))) void RowAvx2(const uint32_t* xp, const float* wide, int64_t k,
                                                 float* y, int64_t cols, bool accumulate) {
  __m256 acc[8];
  for (int v = 0; v < 8; ++v) acc[v] = _mm256_setzero_ps();
  for (int64_t t = 0; t < (k + 1) / 2; ++t) {
    const __m256 x_even = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(xp[t] << 16)));
    const __m256 x_odd =
        _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(xp[t] & 0xFFFF0000u)));
    const float* we = wide + 2 * t * kP;
    const float* wo = we + kP;
    for (int v = 0; v < 8; ++v) {
      acc[v] = FlushAvx2(_mm256_fmadd_ps(x_odd, _mm256_load_ps(wo + 8 * v), acc[v]));
      acc[v] = FlushAvx2(_mm256_fmadd_ps(x_even, _mm256_load_ps(we + 8 * v), acc[v]));
    }
  }
  alignas(32) float out[kP];
  for (int v = 0; v < 8; ++v) _mm256_store_ps(out + 8 * v, acc[v]);
  Store<1>(out, y, 0, cols, accumulate);
}

// The calling thread's pair buffer (m * k words), reused across calls.
uint32_t* PairBuffer(int64_t m, int64_t k) {
  thread_local std::unique_ptr<uint32_t[]> buf;
  thread_local int64_t held = 0;
  const int64_t words = m * k + 1;  // + 1: the zero after an odd k on the last row
  if (words > held) {
    buf.reset(new uint32_t[static_cast<size_t>(words)]);
    held = words;
  }
  return buf.get();
}

}  // namespace

bool HasAvx512Bf16() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512bf16");
  return has;
}

void GemmBf16Dot(const float* x, int64_t m, const PackedWeight& w, float* y, bool accumulate,
                 const Parallel& par, GemmIsa isa) {
  const int64_t n = w.n(), k = w.k();
  uint32_t* xp = PairBuffer(m, k);
  const auto panel = [&](int64_t p) { return reinterpret_cast<const uint16_t*>(w.panel_data(p)); };
  const double work = static_cast<double>(m) * n * k;
  if (isa == GemmIsa::kAvx512 && HasAvx512Bf16()) {
    RoundRowsAvx512(x, m, k, xp);
    if (m <= kStreamMaxRows) return GemmStreamBf16Dot(xp, m, w, y, accumulate, par);
    const auto bytes = static_cast<int64_t>(w.panel_bytes());
    ForTiles(m, w.panels(), work, par, [&](int64_t r0, int64_t r1, int64_t p) {
      const int64_t c0 = p * kP;
      PanelRowsAvx512<DotAvx512>(reinterpret_cast<const float*>(xp), k, r0, r1, panel(p), bytes,
                                 y + c0, n, std::min(kP, n - c0), accumulate);
    });
    return;
  }
  RoundRowsScalar(x, m, k, xp);
  if (isa != GemmIsa::kScalar) {
    ForTiles(m, w.panels(), work, par, [&](int64_t r0, int64_t r1, int64_t p) {
      const int64_t c0 = p * kP;
      float* wide = WidePanelBuffer(k);
      WidenPanelAvx2(panel(p), k, /*flush_subnormals=*/true, wide);  // F(wb)
      for (int64_t r = r0; r < r1; ++r) {
        RowAvx2(xp + r * k, wide, k, y + r * n + c0, std::min(kP, n - c0), accumulate);
      }
    });
    return;
  }
  ForTiles(m, w.panels(), work, par, [&](int64_t r0, int64_t r1, int64_t p) {
    const int64_t c0 = p * kP, cols = std::min(kP, n - c0);
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) {
      BlockScalar<4>(xp + r * k, k, panel(p), k, y + r * n + c0, n, cols, accumulate);
    }
    for (; r < r1; ++r)
      BlockScalar<1>(xp + r * k, k, panel(p), k, y + r * n + c0, n, cols, accumulate);
  });
}

}  // namespace flatstate::cpu
