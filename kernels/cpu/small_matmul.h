// Small dense matrix products for the chunked recurrences' CPU bodies (the one-decay chunk of
// kernels/cpu/gated_linear.cc; RWKV-7's chunked generalized delta rule, kernels/cpu/rwkv7_chunk.cc,
// which only tests run on the CPU): a chunk's [L x N] by [N x N] and
// [L x L] by [L x N] products, L and N up to a few hundred, register-blocked. No state;
// thread-compatible (callers own A, B and C).
//
// Bits: every C[i][j] is its start value (0, or C's value when accumulating) plus the terms
// A(i, p) B[p][j] for p ascending, one multiply-add each (fused where the CPU has FMA: the body is
// a target clone picked once at load, so one machine always uses the same one). The order never
// depends on M, on i or on the tiling, so a row's result is a function of that row's inputs and
// P alone.
#ifndef FLATSTATE_KERNELS_CPU_SMALL_MATMUL_H_
#define FLATSTATE_KERNELS_CPU_SMALL_MATMUL_H_

#include <cstdint>

namespace flatstate::cpu {

// A read-only matrix whose element (i, p) is at data[i * row_stride + p * col_stride] (a
// transposed view is row_stride 1, col_stride = the stored row length).
struct MatView {
  const float* data = nullptr;
  int64_t row_stride = 0;
  int64_t col_stride = 1;
};

// Which part of the product to compute. Rows go in tiles of up to kMatMulRows rows [i0, i1).
//   kFull:  every (i, j), p < P.
//   kInner: A is lower triangular (A(i, p) = 0 for p > i): the tile sums p < min(P, i1) only.
//   kCols:  only C's lower part is wanted: the tile writes columns j < min(Ncols, i1) rounded up
//           to a whole kMatMulCols group (the rest of its rows are left as they were).
enum class MatMulPart { kFull, kInner, kCols };
inline constexpr int kMatMulRows = 6;
inline constexpr int kMatMulCols = 16;

// C[i][j] = (accumulate ? C[i][j] : 0) + sum_{p < P} A(i, p) B[p][j] for i < M, j < Ncols (C row
// i at C + i * ldc, B row p at B + p * ldb, both contiguous in j), restricted by `part`.
void SmallMatMul(int64_t M, int64_t Ncols, int64_t P, const MatView& A, const float* B, int64_t ldb,
                 float* C, int64_t ldc, bool accumulate, MatMulPart part);

}  // namespace flatstate::cpu

#endif  // FLATSTATE_KERNELS_CPU_SMALL_MATMUL_H_
