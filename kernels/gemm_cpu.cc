// CPU GEMM on packed weights: see kernels/gemm.h for the contract (one in-order fma chain per
// output element, identical bits from every body).
//
// Work is cut into tiles of (up to 96 rows) x (one 64-column panel); a thread takes a contiguous
// range of tiles. Inside a tile the body walks row blocks of MR rows, keeping MR x 64 accumulators
// in registers while it streams the panel (k x 64 floats) from cache: AVX-512 uses MR = 6 (24
// zmm accumulators), AVX2 MR = 2 on each 32-column half (8 ymm). Batch-1 decode is then a
// stream over the weights with 4 (AVX-512) independent chains per panel.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "kernels/gemm.h"

namespace flatstate {
namespace {

constexpr int64_t kP = PackedWeight::kPanel;
constexpr int64_t kTileRows = 96;

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

// ---- Scalar body: the definition every other body must equal bit for bit. ----
template <int MR>
void BlockScalar(const float* x, int64_t ldx, const float* p, int64_t k, float* y, int64_t ldy,
                 int64_t cols, bool accumulate) {
  alignas(64) float acc[MR * kP] = {};
  for (int64_t kk = 0; kk < k; ++kk) {
    const float* wk = p + kk * kP;
    for (int i = 0; i < MR; ++i) {
      const float xv = x[i * ldx + kk];
      float* a = acc + i * kP;
      for (int64_t j = 0; j < kP; ++j) a[j] = std::fma(xv, wk[j], a[j]);
    }
  }
  Store<MR>(acc, y, ldy, cols, accumulate);
}

// ---- AVX-512F body. ----
template <int MR>
__attribute__((target("avx512f"))) void BlockAvx512(const float* x, int64_t ldx, const float* p,
                                                    int64_t k, float* y, int64_t ldy, int64_t cols,
                                                    bool accumulate) {
  __m512 acc[MR][4];
  for (int i = 0; i < MR; ++i) {
    for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  for (int64_t kk = 0; kk < k; ++kk) {
    const float* wk = p + kk * kP;
    const __m512 w0 = _mm512_load_ps(wk), w1 = _mm512_load_ps(wk + 16);
    const __m512 w2 = _mm512_load_ps(wk + 32), w3 = _mm512_load_ps(wk + 48);
    for (int i = 0; i < MR; ++i) {
      const __m512 xb = _mm512_set1_ps(x[i * ldx + kk]);
      acc[i][0] = _mm512_fmadd_ps(xb, w0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(xb, w1, acc[i][1]);
      acc[i][2] = _mm512_fmadd_ps(xb, w2, acc[i][2]);
      acc[i][3] = _mm512_fmadd_ps(xb, w3, acc[i][3]);
    }
  }
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

// ---- AVX2 + FMA body: each 64-column panel as two 32-column halves. ----
template <int MR>
__attribute__((target("avx2,fma"))) void HalfAvx2(const float* x, int64_t ldx, const float* p,
                                                  int64_t k, float* acc_out) {
  __m256 acc[MR][4];
  for (int i = 0; i < MR; ++i) {
    for (int v = 0; v < 4; ++v) acc[i][v] = _mm256_setzero_ps();
  }
  for (int64_t kk = 0; kk < k; ++kk) {
    const float* wk = p + kk * kP;
    const __m256 w0 = _mm256_load_ps(wk), w1 = _mm256_load_ps(wk + 8);
    const __m256 w2 = _mm256_load_ps(wk + 16), w3 = _mm256_load_ps(wk + 24);
    for (int i = 0; i < MR; ++i) {
      const __m256 xb = _mm256_broadcast_ss(x + i * ldx + kk);
      acc[i][0] = _mm256_fmadd_ps(xb, w0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(xb, w1, acc[i][1]);
      acc[i][2] = _mm256_fmadd_ps(xb, w2, acc[i][2]);
      acc[i][3] = _mm256_fmadd_ps(xb, w3, acc[i][3]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int v = 0; v < 4; ++v) _mm256_storeu_ps(acc_out + i * kP + 8 * v, acc[i][v]);
  }
}

template <int MR>
__attribute__((target("avx2,fma"))) void BlockAvx2(const float* x, int64_t ldx, const float* p,
                                                   int64_t k, float* y, int64_t ldy, int64_t cols,
                                                   bool accumulate) {
  alignas(64) float buf[MR * kP];
  HalfAvx2<MR>(x, ldx, p, k, buf);
  if (cols > kP / 2) HalfAvx2<MR>(x, ldx, p + kP / 2, k, buf + kP / 2);
  Store<MR>(buf, y, ldy, cols, accumulate);
}

// Rows [r0, r1) of one panel, in blocks of kMr rows (the tail one row at a time).
using BlockFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, int64_t,
                         bool);

template <int kMr, BlockFn kBlock, BlockFn kOne>
void RunRows(const float* x, int64_t k, int64_t r0, int64_t r1, const float* panel, float* y,
             int64_t ldy, int64_t cols, bool accumulate) {
  int64_t r = r0;
  for (; r + kMr <= r1; r += kMr) {
    kBlock(x + r * k, k, panel, k, y + r * ldy, ldy, cols, accumulate);
  }
  for (; r < r1; ++r) kOne(x + r * k, k, panel, k, y + r * ldy, ldy, cols, accumulate);
}

using RowsFn = void (*)(const float*, int64_t, int64_t, int64_t, const float*, float*, int64_t,
                        int64_t, bool);

RowsFn RowsFor(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kAvx512:
      return &RunRows<6, &BlockAvx512<6>, &BlockAvx512<1>>;
    case GemmIsa::kAvx2:
      return &RunRows<2, &BlockAvx2<2>, &BlockAvx2<1>>;
    case GemmIsa::kScalar:
      break;
  }
  return &RunRows<4, &BlockScalar<4>, &BlockScalar<1>>;
}

bool Supports(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kAvx512:
      return __builtin_cpu_supports("avx512f");
    case GemmIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case GemmIsa::kScalar:
      return true;
  }
  return false;
}

std::atomic<GemmIsa>& Active() {
  static std::atomic<GemmIsa> isa{BestGemmIsa()};
  return isa;
}

}  // namespace

PackedWeight PackedWeight::Pack(const float* w, int64_t n, int64_t k) {
  PackedWeight pw;
  pw.n_ = n;
  pw.k_ = k;
  const size_t need = static_cast<size_t>(pw.panels() * kPanel * k);
  // aligned_alloc wants a size that is a multiple of the alignment.
  const size_t bytes = (need * sizeof(float) + 63) / 64 * 64;
  pw.data_.reset(static_cast<float*>(std::aligned_alloc(64, bytes == 0 ? 64 : bytes)));
  if (pw.data_ == nullptr) throw std::bad_alloc();
  float* out = pw.data_.get();
  for (int64_t p = 0; p < pw.panels(); ++p) {
    const int64_t c0 = p * kPanel, cols = std::min(kPanel, n - c0);
    float* dst = out + p * kPanel * k;
    for (int64_t kk = 0; kk < k; ++kk) {
      float* row = dst + kk * kPanel;
      for (int64_t j = 0; j < cols; ++j) row[j] = w[(c0 + j) * k + kk];
      for (int64_t j = cols; j < kPanel; ++j) row[j] = 0.f;
    }
  }
  return pw;
}

const char* GemmIsaName(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kAvx512:
      return "avx512";
    case GemmIsa::kAvx2:
      return "avx2";
    case GemmIsa::kScalar:
      break;
  }
  return "scalar";
}

GemmIsa BestGemmIsa() {
  if (Supports(GemmIsa::kAvx512)) return GemmIsa::kAvx512;
  if (Supports(GemmIsa::kAvx2)) return GemmIsa::kAvx2;
  return GemmIsa::kScalar;
}

GemmIsa ActiveGemmIsa() { return Active().load(std::memory_order_relaxed); }

bool SetGemmIsa(GemmIsa isa) {
  if (!Supports(isa)) return false;
  Active().store(isa, std::memory_order_relaxed);
  return true;
}

void GemmPacked(const float* x, int64_t m, const PackedWeight& w, float* y, bool accumulate,
                const Parallel& par) {
  const int64_t n = w.n(), k = w.k();
  if (m <= 0 || n <= 0) return;
  const RowsFn rows = RowsFor(ActiveGemmIsa());
  const int64_t panels = w.panels();
  const int64_t row_tiles = (m + kTileRows - 1) / kTileRows;
  auto tiles = [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t rt = t / panels, p = t % panels;
      const int64_t r0 = rt * kTileRows, r1 = std::min(m, r0 + kTileRows);
      const int64_t c0 = p * kP;
      rows(x, k, r0, r1, w.panel(p), y + c0, n, std::min(kP, n - c0), accumulate);
    }
  };
  // Small problems (under ~25 us of work) stay on the calling thread: waking the pool costs more.
  if (par.num_threads() == 1 || static_cast<double>(m) * n * k < 1e6) {
    tiles(0, row_tiles * panels);
  } else {
    par.For(row_tiles * panels, tiles);
  }
}

template <>
absl::StatusOr<GemmWeight<Device::kCpu>> PrepareGemmWeight<Device::kCpu>(const float* w,
                                                                         int64_t n, int64_t k) {
  GemmWeight<Device::kCpu> gw;
  gw.n = n;
  gw.k = k;
  try {
    gw.packed = PackedWeight::Pack(w, n, k);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("out of host memory packing a ", n, " x ", k, " weight"));
  }
  return gw;
}

template <>
void Gemm<Device::kCpu>(const float* x, int64_t m, const GemmWeight<Device::kCpu>& w, float* y,
                        bool accumulate, const Parallel& par) {
  GemmPacked(x, m, w.packed, y, accumulate, par);
}

}  // namespace flatstate
