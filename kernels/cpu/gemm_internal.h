// Internals of the CPU GEMM shared by its files: the work split and output store that the bodies
// of every weight type use, and each non-f32 type's packing and GEMM (cpu/gemm.cc dispatches to
// them; cpu/gemm_bf16.cc, cpu/gemm_int8.cc, cpu/gemm_int4.cc, cpu/gemm_stored.cc). No state.
//
// Work is cut into tiles of (up to kTileRows rows) x (one 64-column panel); a thread takes a run
// of panels with all their row tiles (ForTileBlocks). Which thread runs a tile never changes a
// bit of it: each output element is one chain inside one body call (kernels/gemm.h).
#ifndef FLATSTATE_KERNELS_CPU_GEMM_INTERNAL_H_
#define FLATSTATE_KERNELS_CPU_GEMM_INTERNAL_H_

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
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

// The prefetch of `lines` cache lines from `from` (to L2), spread evenly over `steps` calls of
// Step() (a body calls it once per k step). Default-constructed, it prefetches nothing. No effect
// on any result.
class SpreadPrefetch {
 public:
  SpreadPrefetch() = default;
  SpreadPrefetch(const void* from, int64_t lines, int64_t steps)
      : at_(static_cast<const char*>(from)), left_(lines) {
    if (lines <= 0 || steps <= 0) return;
    per_ = (lines + steps - 1) / steps;
    every_ = std::max<int64_t>(1, steps / ((lines + per_ - 1) / per_));
    wait_ = 1;
  }
  void Step() {
    if (--wait_ > 0) return;
    wait_ = every_;
    for (int64_t j = 0; j < per_ && left_ > 0; ++j, --left_, at_ += 64) {
      _mm_prefetch(at_, _MM_HINT_T1);
    }
  }

 private:
  const char* at_ = nullptr;
  int64_t left_ = 0, per_ = 0, every_ = 1;
  int64_t wait_ = INT64_MAX;  // never reaches 0: no prefetch
};

// Rows [r0, r1) of one packed panel of `panel_bytes` bytes on an AVX-512 body: blocks of 6 rows,
// the tail (1-5 rows) as one block of its size (four accumulator chains on one row alone leave
// the FMA units idle). The first block reads the panel from memory, the others from cache, and
// meanwhile they prefetch the next panel (packed panels are contiguous and a thread's panels
// consecutive, ForTileBlocks; past a thread's last panel it is another thread's, or nothing), so
// the next panel's first block finds it in L2 instead of waiting on memory with the FMA units
// idle. Each later block prefetches in proportion to its rows, kPrefetchRows rows' worth of
// blocks a whole panel: a block's time per k step is proportional to its rows, so the rate stays
// near one core's memory bandwidth (a whole panel in one 2-row block, a burst, made batch 8
// slower); from 1 + 24 rows on the next panel is prefetched whole. f32 GPT-2-small-shape GEMMs at
// batch 32: 1.05x-1.2x faster (docs/benchmarks.md, 2026-11-28). Body::Block<MR>(x, ldx, panel, k,
// y, ldy, cols, accumulate, prefetch) computes MR rows; which block prefetches what changes no bit
// (each output is one chain).
inline constexpr int64_t kPrefetchRows = 24;
template <typename Body, typename W>
void PanelRowsAvx512(const float* x, int64_t k, int64_t r0, int64_t r1, const W* panel,
                     int64_t panel_bytes, float* y, int64_t ldy, int64_t cols, bool accumulate) {
  using BlockFn = void (*)(const float*, int64_t, const W*, int64_t, float*, int64_t, int64_t, bool,
                           SpreadPrefetch*);
  static constexpr BlockFn blocks[7] = {nullptr,
                                        &Body::template Block<1>,
                                        &Body::template Block<2>,
                                        &Body::template Block<3>,
                                        &Body::template Block<4>,
                                        &Body::template Block<5>,
                                        &Body::template Block<6>};
  const int64_t lines = panel_bytes / 64;
  const char* next = reinterpret_cast<const char*>(panel) + panel_bytes;
  int64_t prefetched = 0;
  for (int64_t r = r0; r < r1; r += 6) {
    const int64_t mr = std::min<int64_t>(6, r1 - r);
    SpreadPrefetch pf;
    if (r > r0 && prefetched < lines) {
      const int64_t n =
          std::min(lines - prefetched, (lines * mr + kPrefetchRows - 1) / kPrefetchRows);
      pf = SpreadPrefetch(next + prefetched * 64, n, k);
      prefetched += n;
    }
    blocks[mr](x + r * k, k, panel, k, y + r * ldy, ldy, cols, accumulate, &pf);
  }
}

// The low bf16 of each 32-bit lane of a kBf16 panel row as a float (cpu/gemm_bf16.cc,
// cpu/gemm_stream.cc). The shift in its zero-masked form, all lanes: the plain intrinsic's
// undefined-value source trips GCC 12's -Wmaybe-uninitialized. Same result.
__attribute__((target("avx512f"))) inline __m512 LowHalf(__m512i v) {
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, v, 16));
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

// A GEMM of fewer multiply-adds (m * n * k) than this runs on the calling thread. It was 1e6 (about
// 25 us of compute) until 2026-11-27, which kept every layer GEMM of a hidden-512 model's decode
// step (a 512 x 1536 f32 GEMV streams 3 MB) on one thread while the other spun: at 5e4, 2-thread
// batch-1 decode of a 44.6 M Qwen3.5-layout hybrid went from 141-152 to 172-185 tok/s (f32) on a
// 2-vCPU AMD EPYC, the shipped byte-level models' batch 8 from 18-21k to 22-26k tok/s, 1.5e4 was no
// better than 5e4 (docs/benchmarks.md, "Decode GEMMs split from 5e4 multiply-adds"). The pool's
// workers spin between calls (engine/util/thread_pool.h), so a split costs microseconds.
inline constexpr double kSplitMinWork = 5e4;

// block(r0, r1, p0, p1) for every row tile [r0, r1) (kTileRows rows, the last one shorter) and a
// range of panels [p0, p1), covering the m-row GEMM over `panels` panels once: on the calling
// thread when the work is under kSplitMinWork; else, when there are at least as many panels as
// threads, each thread takes an equal run of panels (to one panel) and all the row tiles against
// it, row tile by row tile (so every thread has the same number of rows: a split of (row tile,
// panel) tiles in row-tile order gave a 512-row prefill's short last row tile to one thread, 288
// rows against 224); with fewer panels than threads, contiguous ranges of (row tile, panel) tiles.
template <typename Block>
void ForTileBlocks(int64_t m, int64_t panels, double work, const Parallel& par,
                   const Block& block) {
  const int64_t row_tiles = (m + kTileRows - 1) / kTileRows;
  auto row_tile = [&](int64_t rt, int64_t p0, int64_t p1) {
    const int64_t r0 = rt * kTileRows;
    block(r0, std::min(m, r0 + kTileRows), p0, p1);
  };
  const int threads = par.num_threads();
  if (threads == 1 || work < kSplitMinWork) {
    for (int64_t rt = 0; rt < row_tiles; ++rt) row_tile(rt, 0, panels);
  } else if (panels >= threads) {
    par.For(threads, [&](int64_t b, int64_t e) {
      for (int64_t part = b; part < e; ++part) {
        const int64_t p0 = panels * part / threads, p1 = panels * (part + 1) / threads;
        for (int64_t rt = 0; rt < row_tiles; ++rt) row_tile(rt, p0, p1);
      }
    });
  } else {
    par.For(row_tiles * panels, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) row_tile(t / panels, t % panels, t % panels + 1);
    });
  }
}

// Calls tile(r0, r1, p) for every tile of an m-row GEMM over `panels` panels (ForTileBlocks).
template <typename Tile>
void ForTiles(int64_t m, int64_t panels, double work, const Parallel& par, const Tile& tile) {
  ForTileBlocks(m, panels, work, par, [&](int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) tile(r0, r1, p);
  });
}

// ForTileBlocks' split, each block handed out as runs: run(r0, r1, p0, np) for np <= max_panels
// adjacent panels p0.. of one row tile, so a streaming body reads several panels at once while
// the panels, not groups of them, are what the threads share out evenly.
template <typename Run>
void ForPanelRuns(int64_t m, int64_t panels, int64_t max_panels, double work, const Parallel& par,
                  const Run& run) {
  ForTileBlocks(m, panels, work, par, [&](int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; p += max_panels) run(r0, r1, p, std::min(max_panels, p1 - p));
  });
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

  // Quantises x (over `par` when there is enough of it) with `isa`'s body (cpu/quant_rows.cc:
  // every body gives the scalar definition's bits); each row depends on itself only.
  void Fill(const float* x, int64_t m, int64_t k, const Parallel& par, GemmIsa isa);
};

// Rows of integer-weight panels streamed for small batches (cpu/gemm_int8.cc, cpu/gemm_int4.cc:
// the AVX2 bodies at every batch, AVX512-VNNI below its 3-row tile). Per row, per block b of
// kBlockBytes, the type's kBlock(xq, i, block, acc) adds block b of all 64 columns of a panel
// (i = r * nb + b indexes xq's block), reading the block front to back and prefetching the
// panel's next block as it goes (a few lines per 256 bytes read, not a burst); it does so for
// block b of each of up to kStreamPanels adjacent panels before block b + 1, so one thread keeps
// kStreamPanels sequential streams in flight (one stream per thread reads well below what the
// memory system gives it: docs/benchmarks.md, "AVX2 bodies (issue 33)"). acc (64 floats per
// panel) lives in memory between blocks, leaving the registers to the integer sums. Each column
// is still its own in-order chain over b.
inline constexpr int kStreamPanels = 4;
using StreamBlockFn = void (*)(const QuantRows& xq, int64_t i, const uint8_t* blk, float* acc);
template <size_t kBlockBytes, StreamBlockFn kBlock>
void RowsStreamQ(const QuantRows& xq, int64_t r0, int64_t r1, const PackedWeight& w, int64_t p0,
                 int64_t np, float* y, int64_t ldy, bool accumulate) {
  for (int64_t r = r0; r < r1; ++r) {
    alignas(64) float acc[kStreamPanels][kP] = {};
    for (int64_t b = 0; b < xq.nb; ++b) {
      for (int64_t g = 0; g < np; ++g) {
        kBlock(xq, r * xq.nb + b, w.panel_data(p0 + g) + b * kBlockBytes, acc[g]);
      }
    }
    for (int64_t g = 0; g < np; ++g) {
      const int64_t c0 = (p0 + g) * kP;
      Store<1>(acc[g], y + r * ldy + c0, 0, std::min(kP, w.n() - c0), accumulate);
    }
  }
}

// The whole m-row GEMM on quantised rows xq with RowsStreamQ over ForPanelRuns.
template <size_t kBlockBytes, StreamBlockFn kBlock>
void GemmStreamQ(const QuantRows& xq, int64_t m, const PackedWeight& w, float* y, bool accumulate,
                 const Parallel& par) {
  ForPanelRuns(m, w.panels(), kStreamPanels, static_cast<double>(m) * w.n() * w.k(), par,
               [&](int64_t r0, int64_t r1, int64_t p0, int64_t np) {
                 RowsStreamQ<kBlockBytes, kBlock>(xq, r0, r1, w, p0, np, y, w.n(), accumulate);
               });
}

// Small-batch f32 / bf16 GEMMs (m <= kStreamMaxRows) on the AVX2 or AVX-512 bodies (isa), four
// panels streamed at once (cpu/gemm_stream.cc).
void GemmStreamF32(const float* x, int64_t m, const PackedWeight& w, float* y, bool accumulate,
                   const Parallel& par, GemmIsa isa);
void GemmStreamBf16(const float* x, int64_t m, const PackedWeight& w, float* y, bool accumulate,
                    const Parallel& par, GemmIsa isa);
// kBf16Dot's streamed rows (AVX512-BF16 only) on rows already rounded to bf16 pairs, row i's
// pairs at word i * w.k() (cpu/gemm_bf16_dot.cc's buffer).
void GemmStreamBf16Dot(const uint32_t* xp, int64_t m, const PackedWeight& w, float* y,
                       bool accumulate, const Parallel& par);

// Up to this many rows the f32 / bf16 GEMMs stream panels (GemmStreamF32/Bf16); above it they tile
// 6 rows per panel (cpu/gemm.cc, cpu/gemm_bf16.cc). The same bits either way.
inline constexpr int64_t kStreamMaxRows = 5;

// Rows [r0, r1) (at most kTileRows) of x [., k] against one f32 panel by the tiled AVX2 body
// (cpu/gemm_f32_avx2.cc) into y (row stride ldy), columns [0, cols). F32RowsAvx2 reads a panel of
// a PackedWeight from memory and prefetches as it goes (past its end: the next panel);
// F32RowsAvx2Cached runs on a panel already in cache (the bf16 GEMM's, widened once per tile:
// cpu/gemm_bf16.cc).
void F32RowsAvx2(const float* x, int64_t k, int64_t r0, int64_t r1, const float* panel, float* y,
                 int64_t ldy, int64_t cols, bool accumulate);
void F32RowsAvx2Cached(const float* x, int64_t k, int64_t r0, int64_t r1, const float* panel,
                       float* y, int64_t ldy, int64_t cols, bool accumulate);

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
// F of kBf16Dot (kernels/gemm.h) on 8 lanes: lanes below the smallest normal in magnitude (not
// NaN) keep only their sign.
__attribute__((target("avx2"))) inline __m256 FlushAvx2(__m256 v) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  const __m256 tiny = _mm256_set1_ps(std::numeric_limits<float>::min());
  const __m256 keep = _mm256_cmp_ps(_mm256_andnot_ps(sign, v), tiny, _CMP_NLT_UQ);
  return _mm256_and_ps(v, _mm256_or_ps(keep, sign));
}
// A kBf16 / kBf16Dot panel widened to the f32 panel layout (2 * ceil(k / 2) rows of 64 floats,
// an odd k's last row the pair's zero half; exact: each bf16 becomes its float's top half), with
// subnormal weights flushed (FlushAvx2) when asked (kBf16Dot's F(wb)), for the AVX2 rows of the
// bf16 and bf16dot GEMMs (cpu/gemm_bf16.cc).
void WidenPanelAvx2(const uint16_t* p, int64_t k, bool flush_subnormals, float* out);
// The calling thread's buffer for one bf16 panel widened to fp32 (2 * ceil(k / 2) rows of 64
// floats, 64-byte aligned), kept across calls at the largest k seen (the AVX2 bf16 and bf16dot
// bodies; cpu/gemm_bf16.cc). Throws std::bad_alloc. Pool workers call it for their own.
float* WidePanelBuffer(int64_t k);
// kBf16Dot (its panels are kBf16's: PackBf16 / PackBf16Bits); cpu/gemm_bf16_dot.cc.
void GemmBf16Dot(const float* x, int64_t m, const PackedWeight& w, float* y, bool accumulate,
                 const Parallel& par, GemmIsa isa);
// True when the CPU has what the AVX512-BF16 kBf16Dot body needs (AVX-512F/BW/VL, AVX512-BF16).
bool HasAvx512Bf16();

}  // namespace flatstate::cpu

#endif  // FLATSTATE_KERNELS_CPU_GEMM_INTERNAL_H_
