// Internals of the CPU GEMM shared by its files: the work split and output store that the bodies
// of every weight type use, and each non-f32 type's packing and GEMM (cpu/gemm.cc dispatches to
// them; cpu/gemm_bf16.cc, cpu/gemm_int8.cc, cpu/gemm_int4.cc, cpu/gemm_stored.cc). No state.
//
// Work is cut into tiles of (up to kTileRows rows) x (one 64-column panel); a thread takes a
// contiguous range of tiles. Which thread runs a tile never changes a bit of it: each output
// element is one chain inside one body call (kernels/gemm.h).
#ifndef FLATSTATE_KERNELS_CPU_GEMM_INTERNAL_H_
#define FLATSTATE_KERNELS_CPU_GEMM_INTERNAL_H_

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/parallel.h"

namespace flatstate::cpu {

inline constexpr int64_t kP = PackedWeight::kPanel;
inline constexpr int64_t kTileRows = 96;

// Writes an MR x 64 block of accumulators (row stride 64 in `acc`) to y, columns [0, cols).
template <int MR>
inline void Store(const float* acc, float* y, int64_t ldy, int64_t cols, bool accumulate) {
  for (int i = 0; i < MR; ++i) {
    float* dst = y + i * ldy;
    const float* src = acc + i * kP;
    if (accumulate) {
      for (int64_t j = 0; j < cols; ++j) dst[j] += src[j];
    } else {
      std::memcpy(dst, src, sizeof(float) * cols);
    }
  }
}

// At small batches a GEMM streams each weight panel from memory once. The AVX-512 bodies that
// spend several instructions per weight byte (bf16 widening, int8/int4 dot products) leave fewer
// cache-line fills in flight than the hardware allows, so for MR <= kPrefetchMaxRows they prefetch
// the panel kPrefetchBytes ahead of what they read (benchmarks.md, run 8: bf16 at batch 1 went
// from ~8 to ~10 GB/s on one thread). The f32 body gained nothing from it and does not. No effect
// on any result.
inline constexpr int64_t kPrefetchBytes = 2048;
inline constexpr int kPrefetchMaxRows = 4;
template <int MR>
inline void PrefetchPanel(const void* p, int64_t bytes) {
  if constexpr (MR <= kPrefetchMaxRows) {
    const char* c = static_cast<const char*>(p) + kPrefetchBytes;
    for (int64_t b = 0; b < bytes; b += 64) _mm_prefetch(c + b, _MM_HINT_T0);
  }
}

// Writes MR rows of 4 zmm accumulators (64 columns) to y, columns [0, cols).
template <int MR>
__attribute__((target("avx512f"))) inline void StoreZmm(const __m512 (&acc)[MR][4], float* y,
                                                        int64_t ldy, int64_t cols,
                                                        bool accumulate) {
  if (cols == kP) {
    for (int i = 0; i < MR; ++i) {
      float* dst = y + i * ldy;
      for (int v = 0; v < 4; ++v) {
        __m512 r = acc[i][v];
        if (accumulate) r = _mm512_add_ps(_mm512_loadu_ps(dst + 16 * v), r);
        _mm512_storeu_ps(dst + 16 * v, r);
      }
    }
    return;
  }
  alignas(64) float buf[MR * kP];
  for (int i = 0; i < MR; ++i) {
    for (int v = 0; v < 4; ++v) _mm512_store_ps(buf + i * kP + 16 * v, acc[i][v]);
  }
  Store<MR>(buf, y, ldy, cols, accumulate);
}

// Calls tile(r0, r1, p) for every tile of an m-row GEMM over `panels` panels: on the calling
// thread when the work (m * n * k multiply-adds) is under ~25 us, where waking the pool costs
// more, else split over `par`.
template <typename Tile>
void ForTiles(int64_t m, int64_t panels, double work, const Parallel& par, const Tile& tile) {
  const int64_t row_tiles = (m + kTileRows - 1) / kTileRows;
  auto run = [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t rt = t / panels, p = t % panels;
      const int64_t r0 = rt * kTileRows;
      tile(r0, std::min(m, r0 + kTileRows), p);
    }
  };
  if (par.num_threads() == 1 || work < 1e6) {
    run(0, row_tiles * panels);
  } else {
    par.For(row_tiles * panels, run);
  }
}

// The rows of an activation matrix x [m, k] quantised per block of 32 for the integer weight
// types (QuantizeBlockInt8, kernels/gemm.h): row r's block b is q[(r * nb + b) * 32 ..] (zero
// past k), its scale s[r * nb + b] and the sum of its quants sum[r * nb + b] (the integer bodies
// use it to take the unsigned weights' offset back out).
struct QuantRows {
  std::vector<int8_t> q;
  std::vector<float> s;
  std::vector<int32_t> sum;
  int64_t nb = 0;

  // Quantises x (over `par` when there is enough of it); each row depends on itself only.
  void Fill(const float* x, int64_t m, int64_t k, const Parallel& par);
};

// One row of an integer-weight panel on AVX2 (cpu/gemm_int8.cc, cpu/gemm_int4.cc): per block of
// kBlockBytes, both 32-column halves of the panel by the type's kHalf(qx, sx, block, half, acc),
// so the panel streams front to back once; then the 64 columns stored.
using HalfBlockAvx2Fn = void (*)(const int8_t* qx, __m256 sx, const uint8_t* blk, int half,
                                 __m256 (&acc)[4]);
template <size_t kBlockBytes, HalfBlockAvx2Fn kHalf>
__attribute__((target("avx2,fma"))) void RowAvx2Blocks(const QuantRows& xq, int64_t r,
                                                       const uint8_t* panel, float* y, int64_t cols,
                                                       bool accumulate) {
  __m256 acc[2][4];
  for (auto& h : acc) {
    for (__m256& a : h) a = _mm256_setzero_ps();
  }
  const int halves = cols > kP / 2 ? 2 : 1;
  for (int64_t b = 0; b < xq.nb; ++b) {
    const uint8_t* blk = panel + b * kBlockBytes;
    const int8_t* qx = xq.q.data() + (r * xq.nb + b) * PackedWeight::kInt8Block;
    const __m256 sx = _mm256_set1_ps(xq.s[r * xq.nb + b]);
    for (int h = 0; h < halves; ++h) kHalf(qx, sx, blk, h, acc[h]);
  }
  alignas(64) float buf[kP];
  for (int h = 0; h < 2; ++h) {
    for (int v = 0; v < 4; ++v) _mm256_store_ps(buf + h * (kP / 2) + 8 * v, acc[h][v]);
  }
  Store<1>(buf, y, 0, cols, accumulate);
}

// The calling thread's QuantRows, reused across calls, so it keeps the largest call's size
// (about m * k * 1.1 bytes: 4.5 MB for a 512-row step at k = 3072). Pool workers only read the
// caller's: capture the reference, never call this in a worker.
QuantRows& ThreadQuantRows();

// Per type: Pack* fills a PackedWeight's buffer (panels() * PanelBytes(dtype, k) bytes) with the
// layout of kernels/gemm.h; Gemm* is GemmPacked for that type with body `isa`.
void PackBf16(const float* w, int64_t n, int64_t k, uint8_t* out);
// The same layout from bf16 bits wb [n, k] (copied as they are).
void PackBf16Bits(const uint16_t* wb, int64_t n, int64_t k, uint8_t* out);
void GemmBf16(const float* x, int64_t m, const PackedWeight& w, float* y, bool accumulate,
              const Parallel& par, GemmIsa isa);
// (The int8 / int4 panels from quants and scales a model file stores, no rounding:
// PackedWeight::PackQuantized, cpu/gemm_stored.cc.)
void PackInt8(const float* w, int64_t n, int64_t k, uint8_t* out);
void GemmInt8(const float* x, int64_t m, const PackedWeight& w, float* y, bool accumulate,
              const Parallel& par, GemmIsa isa);
void PackInt4(const float* w, int64_t n, int64_t k, uint8_t* out);
void GemmInt4(const float* x, int64_t m, const PackedWeight& w, float* y, bool accumulate,
              const Parallel& par, GemmIsa isa);
// True when the CPU has what the AVX512-VNNI int8 body needs (AVX-512F/BW and AVX512-VNNI).
bool HasInt8Vnni();

}  // namespace flatstate::cpu

#endif  // FLATSTATE_KERNELS_CPU_GEMM_INTERNAL_H_
