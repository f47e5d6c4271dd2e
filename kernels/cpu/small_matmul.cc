// The body of kernels/cpu/small_matmul.h: GCC vector-extension tiles of kMatMulRows rows by 16
// floats (two 8-float vectors per row: two ymm, or four xmm in the baseline clone), the broadcast
// of A(i, p) times B's row p accumulated in registers; columns past the last whole group one by
// one. Built with -ffp-contract=fast (kernels/CMakeLists.txt): the clones with FMA fuse every
// multiply-add, vector and scalar alike. The AVX2 clone is x86-64-v3 (AVX2 + FMA): a clone for
// "avx2" alone has no FMA, twice the micro-ops where adds share the FMA ports (no faster on the
// AMD EPYC measured in docs/benchmarks.md, whose adds have pipes of their own).
#include "kernels/cpu/small_matmul.h"

#include <algorithm>

#include "kernels/cpu/target_clones.h"

namespace flatstate::cpu {
namespace {

// Eight floats (one ymm, or two xmm in the baseline clone) at any float's alignment; a tile row is
// kV of them. (Tiles of 16-float vectors, loaded through memcpy, were lowered by GCC 12 on AVX2
// through the stack: 1,563 stack moves against 90 FMAs in the x86-64-v3 clone, 2026-11-27.)
typedef float V8 __attribute__((vector_size(32), aligned(4)));
constexpr int kV = kMatMulCols / 8;

inline __attribute__((always_inline)) const V8* At(const float* p) {
  return reinterpret_cast<const V8*>(p);
}
inline __attribute__((always_inline)) V8* At(float* p) { return reinterpret_cast<V8*>(p); }

// Rows [i0, i0 + R) by the 16 columns at j0, p < P.
template <int R>
inline __attribute__((always_inline)) void Tile(int64_t i0, int64_t j0, int64_t P, const MatView& A,
                                                const float* B, int64_t ldb, float* C, int64_t ldc,
                                                bool accumulate) {
  V8 c[R][kV];
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < kV; ++v) c[r][v] = accumulate ? At(C + (i0 + r) * ldc + j0)[v] : V8{};
  }
  const float* a0 = A.data + i0 * A.row_stride;
  for (int64_t p = 0; p < P; ++p) {
    const V8* b = At(B + p * ldb + j0);
    const float* ap = a0 + p * A.col_stride;
    for (int r = 0; r < R; ++r) {
      for (int v = 0; v < kV; ++v) c[r][v] += ap[r * A.row_stride] * b[v];
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < kV; ++v) At(C + (i0 + r) * ldc + j0)[v] = c[r][v];
  }
}

// The same for columns [j0, j1) (fewer than 16), one float at a time.
inline void TailColumns(int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t P, const MatView& A,
                        const float* B, int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  for (int64_t i = i0; i < i1; ++i) {
    for (int64_t j = j0; j < j1; ++j) {
      float c = accumulate ? C[i * ldc + j] : 0.f;
      for (int64_t p = 0; p < P; ++p) {
        c += A.data[i * A.row_stride + p * A.col_stride] * B[p * ldb + j];
      }
      C[i * ldc + j] = c;
    }
  }
}

template <int R>
inline __attribute__((always_inline)) void RowTile(int64_t i0, int64_t Ncols, int64_t P,
                                                   const MatView& A, const float* B, int64_t ldb,
                                                   float* C, int64_t ldc, bool accumulate,
                                                   MatMulPart part) {
  const int64_t i1 = i0 + R;
  int64_t cols = Ncols, inner = P;
  if (part == MatMulPart::kInner) inner = std::min(P, i1);
  if (part == MatMulPart::kCols) {
    cols = std::min(Ncols, (i1 + kMatMulCols - 1) / kMatMulCols * kMatMulCols);
  }
  int64_t j = 0;
  for (; j + kMatMulCols <= cols; j += kMatMulCols) {
    Tile<R>(i0, j, inner, A, B, ldb, C, ldc, accumulate);
  }
  if (j < cols) TailColumns(i0, i1, j, cols, inner, A, B, ldb, C, ldc, accumulate);
}

}  // namespace

FLATSTATE_TARGET_CLONES void SmallMatMul(int64_t M, int64_t Ncols, int64_t P, const MatView& A,
                                         const float* B, int64_t ldb, float* C, int64_t ldc,
                                         bool accumulate, MatMulPart part) {
  int64_t i = 0;
  for (; i + kMatMulRows <= M; i += kMatMulRows) {
    RowTile<kMatMulRows>(i, Ncols, P, A, B, ldb, C, ldc, accumulate, part);
  }
  switch (M - i) {
    case 5:
      RowTile<5>(i, Ncols, P, A, B, ldb, C, ldc, accumulate, part);
      break;
    case 4:
      RowTile<4>(i, Ncols, P, A, B, ldb, C, ldc, accumulate, part);
      break;
    case 3:
      RowTile<3>(i, Ncols, P, A, B, ldb, C, ldc, accumulate, part);
      break;
    case 2:
      RowTile<2>(i, Ncols, P, A, B, ldb, C, ldc, accumulate, part);
      break;
    case 1:
      RowTile<1>(i, Ncols, P, A, B, ldb, C, ldc, accumulate, part);
      break;
    default:
      break;
  }
}

}  // namespace flatstate::cpu
