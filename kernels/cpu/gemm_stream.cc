// Small-batch (decode) f32, bf16 and bf16dot GEMMs on the AVX2 and AVX-512 bodies (bf16dot:
// AVX512-BF16 only): several panels
// streamed at once from memory, each column still the one in-order fma chain of kernels/gemm.h
// (so the same bits as the tiled bodies in cpu/gemm.cc and cpu/gemm_bf16.cc and the scalar
// definition; tests/kernels/gemm_test.cc). Why: at batch 1 a GEMM is as fast as its weights come
// from memory, and one sequential stream per thread reads well below that (docs/benchmarks.md,
// "AVX2 bodies (issue 33)"): interleaving four panels in 4-row chunks with a 1 KiB prefetch read
// the 1.2 GB f32 Llama-340M weight set at 15.5 GB/s on one thread against 10.8 before.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/gemm_internal.h"
#include "kernels/gemm.h"

namespace flatstate::cpu {
namespace {

// Small-batch rows of fp32-chain panels (f32, bf16; AVX2 and AVX-512 bodies), streamed as the
// integer rows of cpu/gemm_internal.h are: k in chunks of kChunkK rows, each chunk of up to
// kStreamPanels adjacent panels in turn, and each panel chunk applied to every row of the call
// before the next (the rows share one pass over the weights: a chunk read from memory for the
// first row is in L1 for the others), the 64 accumulators of a (row, panel) kept in memory
// between chunks (8 loads and stores per chunk, against 4 x kChunkK fmas). kChunk(x, panel,
// kk0, kk1, acc) adds rows [kk0, kk1) of one panel to acc in k order and prefetches the panel
// kChunkK rows (1 KiB) ahead. Chunks of 1 KiB (4 rows of f32, 8 of bf16) beat 2, 4 and 8 KiB
// (finer interleaving of the streams), 4 panels beat 2 and 8 (docs/benchmarks.md); bf16 in 4-row
// (512-byte) chunks spent twice the accumulator loads, stores and calls per byte. Each column of
// each row is the same in-order chain as in every other body, whatever else the call holds.
using StreamChunkFn = void (*)(const float* x, const uint8_t* panel, int64_t kk0, int64_t kk1,
                               float* acc);
template <StreamChunkFn kChunk, int64_t kChunkK>
void RowsStreamF(const float* x, int64_t r0, int64_t r1, const PackedWeight& w, int64_t p0,
                 int64_t np, float* y, int64_t ldy, bool accumulate) {
  const int64_t k = w.k();
  const uint8_t* panels[kStreamPanels];
  for (int64_t g = 0; g < np; ++g) panels[g] = w.panel_data(p0 + g);
  for (int64_t rb = r0; rb < r1; rb += kStreamMaxRows) {
    const int64_t rows = std::min<int64_t>(kStreamMaxRows, r1 - rb);
    alignas(64) float acc[kStreamMaxRows][kStreamPanels][kP] = {};
    for (int64_t kc = 0; kc < k; kc += kChunkK) {
      const int64_t kend = std::min(k, kc + kChunkK);
      for (int64_t g = 0; g < np; ++g) {
        for (int64_t i = 0; i < rows; ++i) {
          kChunk(x + (rb + i) * k, panels[g], kc, kend, acc[i][g]);
        }
      }
    }
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t g = 0; g < np; ++g) {
        const int64_t c0 = (p0 + g) * kP;
        Store<1>(acc[i][g], y + (rb + i) * ldy + c0, 0, std::min(kP, w.n() - c0), accumulate);
      }
    }
  }
}

// Runs an m-row fp32-chain GEMM with RowsStreamF over ForPanelRuns.
template <StreamChunkFn kChunk, int64_t kChunkK>
void GemmStreamF(const float* x, int64_t m, const PackedWeight& w, float* y, bool accumulate,
                 const Parallel& par) {
  ForPanelRuns(m, w.panels(), kStreamPanels, static_cast<double>(m) * w.n() * w.k(), par,
               [&](int64_t r0, int64_t r1, int64_t p0, int64_t np) {
                 RowsStreamF<kChunk, kChunkK>(x, r0, r1, w, p0, np, y, w.n(), accumulate);
               });
}

inline constexpr int64_t kF32ChunkK = 4;   // rows of 64 floats: 1 KiB
inline constexpr int64_t kBf16ChunkK = 8;  // rows of 64 bf16: 1 KiB

// Rows [kk0, kk1) of one f32 panel into acc (64 floats), AVX-512 (4 zmm chains).
__attribute__((target("avx512f"))) void F32ChunkAvx512(const float* x, const uint8_t* panel,
                                                       int64_t kk0, int64_t kk1, float* acc) {
  const float* p = reinterpret_cast<const float*>(panel);
  __m512 a[4];
  for (int v = 0; v < 4; ++v) a[v] = _mm512_load_ps(acc + 16 * v);
  for (int64_t kk = kk0; kk < kk1; ++kk) {
    const float* wk = p + kk * kP;
    for (int l = 0; l < 4; ++l) {
      _mm_prefetch(reinterpret_cast<const char*>(wk + kF32ChunkK * kP) + 64 * l, _MM_HINT_T0);
    }
    const __m512 xb = _mm512_set1_ps(x[kk]);
    for (int v = 0; v < 4; ++v) a[v] = _mm512_fmadd_ps(xb, _mm512_load_ps(wk + 16 * v), a[v]);
  }
  for (int v = 0; v < 4; ++v) _mm512_store_ps(acc + 16 * v, a[v]);
}

// Rows [kk0, kk1) of one f32 panel into acc (64 floats), AVX2 (8 ymm chains).
__attribute__((target("avx2,fma"))) void F32ChunkAvx2(const float* x, const uint8_t* panel,
                                                      int64_t kk0, int64_t kk1, float* acc) {
  const float* p = reinterpret_cast<const float*>(panel);
  __m256 a[8];
  for (int v = 0; v < 8; ++v) a[v] = _mm256_load_ps(acc + 8 * v);
  for (int64_t kk = kk0; kk < kk1; ++kk) {
    const float* wk = p + kk * kP;
    for (int l = 0; l < 4; ++l) {
      _mm_prefetch(reinterpret_cast<const char*>(wk + kF32ChunkK * kP) + 64 * l, _MM_HINT_T0);
    }
    const __m256 xb = _mm256_broadcast_ss(x + kk);
    for (int v = 0; v < 8; ++v) a[v] = _mm256_fmadd_ps(xb, _mm256_load_ps(wk + 8 * v), a[v]);
  }
  for (int v = 0; v < 8; ++v) _mm256_store_ps(acc + 8 * v, a[v]);
}

// Rows [kk0, kk1) of one bf16 panel into acc (64 floats), AVX-512; kk0 is even.
__attribute__((target("avx512f"))) void Bf16ChunkAvx512(const float* x, const uint8_t* panel,
                                                        int64_t kk0, int64_t kk1, float* acc) {
  const uint16_t* p = reinterpret_cast<const uint16_t*>(panel);
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  __m512 a[4];
  for (int v = 0; v < 4; ++v) a[v] = _mm512_load_ps(acc + 16 * v);
  int64_t kk = kk0;
  for (; kk + 2 <= kk1; kk += 2) {
    const __m512i* wk = reinterpret_cast<const __m512i*>(p + kk * kP);
    for (int l = 0; l < 4; ++l) {
      _mm_prefetch(reinterpret_cast<const char*>(p + (kk + kBf16ChunkK) * kP) + 64 * l,
                   _MM_HINT_T0);
    }
    const __m512 x0 = _mm512_set1_ps(x[kk]), x1 = _mm512_set1_ps(x[kk + 1]);
    for (int v = 0; v < 4; ++v) {
      const __m512i raw = _mm512_load_si512(wk + v);
      a[v] = _mm512_fmadd_ps(x0, LowHalf(raw), a[v]);
      a[v] = _mm512_fmadd_ps(x1, _mm512_castsi512_ps(_mm512_and_si512(raw, high)), a[v]);
    }
  }
  if (kk < kk1) {
    const __m512i* wk = reinterpret_cast<const __m512i*>(p + kk * kP);
    const __m512 x0 = _mm512_set1_ps(x[kk]);
    for (int v = 0; v < 4; ++v)
      a[v] = _mm512_fmadd_ps(x0, LowHalf(_mm512_load_si512(wk + v)), a[v]);
  }
  for (int v = 0; v < 4; ++v) _mm512_store_ps(acc + 16 * v, a[v]);
}

// Rows [kk0, kk1) of one bf16 panel into acc (64 floats), AVX2; kk0 is even (chunks of
// kBf16ChunkK). The widening is the 6-row bodies' (cpu/gemm_bf16.cc).
__attribute__((target("avx2,fma"))) void Bf16ChunkAvx2(const float* x, const uint8_t* panel,
                                                       int64_t kk0, int64_t kk1, float* acc) {
  const uint16_t* p = reinterpret_cast<const uint16_t*>(panel);
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  __m256 a[8];
  for (int v = 0; v < 8; ++v) a[v] = _mm256_load_ps(acc + 8 * v);
  int64_t kk = kk0;
  for (; kk + 2 <= kk1; kk += 2) {
    const uint16_t* wk = p + kk * kP;
    for (int l = 0; l < 4; ++l) {
      _mm_prefetch(reinterpret_cast<const char*>(wk + kBf16ChunkK * kP) + 64 * l, _MM_HINT_T0);
    }
    const __m256 x0 = _mm256_broadcast_ss(x + kk), x1 = _mm256_broadcast_ss(x + kk + 1);
    for (int v = 0; v < 8; ++v) {
      const __m256i raw = _mm256_load_si256(reinterpret_cast<const __m256i*>(wk + 16 * v));
      a[v] = _mm256_fmadd_ps(x0, _mm256_castsi256_ps(_mm256_slli_epi32(raw, 16)), a[v]);
      a[v] = _mm256_fmadd_ps(x1, _mm256_castsi256_ps(_mm256_and_si256(raw, high)), a[v]);
    }
  }
  if (kk < kk1) {
    const uint16_t* wk = p + kk * kP;
    const __m256 x0 = _mm256_broadcast_ss(x + kk);
    for (int v = 0; v < 8; ++v) {
      const __m256i raw = _mm256_load_si256(reinterpret_cast<const __m256i*>(wk + 16 * v));
      a[v] = _mm256_fmadd_ps(x0, _mm256_castsi256_ps(_mm256_slli_epi32(raw, 16)), a[v]);
    }
  }
  for (int v = 0; v < 8; ++v) _mm256_store_ps(acc + 8 * v, a[v]);
}

// Rows [kk0, kk1) of one bf16 panel into acc (64 floats) by kBf16Dot's chain (vdpbf16ps,
// cpu/gemm_bf16_dot.cc); `x` is the row's bf16 pairs (one 32-bit word per pair), kk0 is even, and
// an odd kk1 (the end of an odd k) takes the last pair whole, its zero high halves included.
__attribute__((target("avx512f,avx512bf16"))) void Bf16DotChunkAvx512(const float* x,
                                                                      const uint8_t* panel,
                                                                      int64_t kk0, int64_t kk1,
                                                                      float* acc) {
  const uint32_t* xp = reinterpret_cast<const uint32_t*>(x);
  const uint16_t* p = reinterpret_cast<const uint16_t*>(panel);
  __m512 a[4];
  for (int v = 0; v < 4; ++v) a[v] = _mm512_load_ps(acc + 16 * v);
  for (int64_t t = kk0 / 2; t < (kk1 + 1) / 2; ++t) {
    const __m512i* wt = reinterpret_cast<const __m512i*>(p + 2 * t * kP);
    for (int l = 0; l < 4; ++l) {
      _mm_prefetch(reinterpret_cast<const char*>(p + (2 * t + kBf16ChunkK) * kP) + 64 * l,
                   _MM_HINT_T0);
    }
    const __m512i xb = _mm512_set1_epi32(static_cast<int>(xp[t]));
    for (int v = 0; v < 4; ++v) {
      a[v] = _mm512_dpbf16_ps(a[v], reinterpret_cast<__m512bh>(xb),
                              reinterpret_cast<__m512bh>(_mm512_load_si512(wt + v)));
    }
  }
  for (int v = 0; v < 4; ++v) _mm512_store_ps(acc + 16 * v, a[v]);
}

}  // namespace

void GemmStreamBf16Dot(const uint32_t* xp, int64_t m, const PackedWeight& w, float* y,
                       bool accumulate, const Parallel& par) {
  GemmStreamF<&Bf16DotChunkAvx512, kBf16ChunkK>(reinterpret_cast<const float*>(xp), m, w, y,
                                                accumulate, par);
}

void GemmStreamF32(const float* x, int64_t m, const PackedWeight& w, float* y, bool accumulate,
                   const Parallel& par, GemmIsa isa) {
  if (isa == GemmIsa::kAvx2) {
    return GemmStreamF<&F32ChunkAvx2, kF32ChunkK>(x, m, w, y, accumulate, par);
  }
  GemmStreamF<&F32ChunkAvx512, kF32ChunkK>(x, m, w, y, accumulate, par);
}

void GemmStreamBf16(const float* x, int64_t m, const PackedWeight& w, float* y, bool accumulate,
                    const Parallel& par, GemmIsa isa) {
  if (isa == GemmIsa::kAvx2) {
    return GemmStreamF<&Bf16ChunkAvx2, kBf16ChunkK>(x, m, w, y, accumulate, par);
  }
  GemmStreamF<&Bf16ChunkAvx512, kBf16ChunkK>(x, m, w, y, accumulate, par);
}

}  // namespace flatstate::cpu
