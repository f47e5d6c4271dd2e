// The tiled AVX2 + FMA body of the fp32-chain GEMMs (f32, and bf16 on a panel widened once per
// tile: cpu/gemm_bf16.cc), for calls of more than kStreamMaxRows rows. Each output element is the
// one in-order fma chain of kernels/gemm.h, so the same bits as every other body.
//
// k is cut into blocks of kKBlock rows; for each block, each of the panel's four 16-column strips
// (8 KiB of the block, held in L1) is applied to every row of the tile, up to 6 rows at a time
// with 6 x 2 ymm accumulators (12 of the 16 registers: each weight vector loaded feeds up to 6
// FMAs). The accumulators live in a per-tile buffer (rows x 64 floats) between blocks: a stored
// fp32 accumulator reloaded is the same chain. Why the blocks: a strip over the whole k (48 KiB
// at k = 768, 192 KiB at 3,072) does not fit L1, so the former body read it from L2 once per 6
// rows. A tile's rows go in blocks as equal as possible (32 rows: 5, 5, 5, 5, 6, 6), so no block
// of one or two rows is left to run on a few latency-bound chains. A panel streamed from memory
// (F32RowsAvx2) has each strip's first row block prefetch that strip's lines of the next k
// block. Measured: docs/benchmarks.md, "The tiled AVX2 f32 GEMM body in L1-sized k blocks".
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/gemm_internal.h"

namespace flatstate::cpu {
namespace {

constexpr int64_t kStrip = 16;
constexpr int64_t kKBlock = 128;
constexpr int kMaxRows = 6;

// Rows [kk0, kk1) of a strip (row stride kP from ps) applied to MR rows of x (row stride ldx):
// acc (MR rows of kStrip, row stride kP) holds each row's 16 chains (zeros before the first
// block). With kPrefetch, also prefetches line `pf + (kk - kk0) * kP` for each kk.
template <int MR, bool kPrefetch>
__attribute__((target("avx2,fma"))) void StripBlock(const float* x, int64_t ldx, const float* ps,
                                                    int64_t kk0, int64_t kk1, float* acc,
                                                    const float* pf) {
  // The row loops unrolled by pragma: unrolled only at -O3's later passes, GCC 12 kept `a` in
  // memory and stored all 12 accumulators to the stack on every k.
  __m256 a[MR][2];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    a[i][0] = _mm256_load_ps(acc + i * kP);
    a[i][1] = _mm256_load_ps(acc + i * kP + 8);
  }
  for (int64_t kk = kk0; kk < kk1; ++kk) {
    if constexpr (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(pf), _MM_HINT_T0);
    pf += kP;
    const __m256 w0 = _mm256_load_ps(ps + kk * kP), w1 = _mm256_load_ps(ps + kk * kP + 8);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256 xb = _mm256_broadcast_ss(x + i * ldx + kk);
      a[i][0] = _mm256_fmadd_ps(xb, w0, a[i][0]);
      a[i][1] = _mm256_fmadd_ps(xb, w1, a[i][1]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    _mm256_store_ps(acc + i * kP, a[i][0]);
    _mm256_store_ps(acc + i * kP + 8, a[i][1]);
  }
}

using StripBlockFn = void (*)(const float*, int64_t, const float*, int64_t, int64_t, float*,
                              const float*);
template <bool kPrefetch>
constexpr StripBlockFn kStripBlocks[kMaxRows + 1] = {nullptr,
                                                     &StripBlock<1, kPrefetch>,
                                                     &StripBlock<2, kPrefetch>,
                                                     &StripBlock<3, kPrefetch>,
                                                     &StripBlock<4, kPrefetch>,
                                                     &StripBlock<5, kPrefetch>,
                                                     &StripBlock<6, kPrefetch>};

// kStream: the panel comes from memory, so each strip's first row block prefetches the strip's
// lines of the next k block (past the last, the next panel's first: panels are adjacent).
template <bool kStream>
void Rows(const float* x, int64_t k, int64_t r0, int64_t r1, const float* panel, float* y,
          int64_t ldy, int64_t cols, bool accumulate) {
  const int64_t rows = r1 - r0;
  if (rows <= 0) return;
  const int64_t blocks = (rows + kMaxRows - 1) / kMaxRows;
  alignas(64) float acc[kTileRows * kP];
  std::memset(acc, 0, sizeof(float) * rows * kP);
  for (int64_t kb = 0; kb < k; kb += kKBlock) {
    const int64_t ke = std::min(k, kb + kKBlock);
    const float* next = panel + ke * kP;
    for (int64_t s0 = 0; s0 < cols; s0 += kStrip) {
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t lo = rows * b / blocks, hi = rows * (b + 1) / blocks;
        const auto* fns = kStream && b == 0 ? kStripBlocks<true> : kStripBlocks<false>;
        fns[hi - lo](x + (r0 + lo) * k, k, panel + s0, kb, ke, acc + lo * kP + s0, next + s0);
      }
    }
  }
  for (int64_t i = 0; i < rows; ++i) {
    Store<1>(acc + i * kP, y + (r0 + i) * ldy, ldy, cols, accumulate);
  }
}

}  // namespace

void F32RowsAvx2(const float* x, int64_t k, int64_t r0, int64_t r1, const float* panel, float* y,
                 int64_t ldy, int64_t cols, bool accumulate) {
  Rows<true>(x, k, r0, r1, panel, y, ldy, cols, accumulate);
}

void F32RowsAvx2Cached(const float* x, int64_t k, int64_t r0, int64_t r1, const float* panel,
                       float* y, int64_t ldy, int64_t cols, bool accumulate) {
  Rows<false>(x, k, r0, r1, panel, y, ldy, cols, accumulate);
}

}  // namespace flatstate::cpu
