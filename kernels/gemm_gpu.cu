// CUDA body of kernels/gemm.h: y[m, n] = x[m, k] * w[n, k]^T (+ y) through cublasGemmEx with
// CUBLAS_COMPUTE_32F on a handle in CUBLAS_DEFAULT_MATH mode, i.e. plain FP32 (no TF32), so the
// results match the CPU to fp32 rounding. x, y and the weight are device memory; `par` is unused.
//
// Batch invariance through cuBLAS holds to rounding only: cuBLAS may pick a different kernel
// (tile shape, split-K) for a different m, so a row's floats can change with the batch size.
// Results are deterministic for a given shape (no atomics). See docs/gpu.md.
//
// A weight with `batch_invariant` set is multiplied by GemmFixedOrder instead: every output
// element is one thread's chain acc = fmaf(x[i][kk], w[j][kk], acc), kk = 0..k-1 in order from
// acc = 0, then y = acc or y + acc: the CPU GEMM's order of operations (gemm.h), so its bits, for
// any m and any position of the row in the batch. Tiles of 64 rows x 64 columns share x and w
// through shared memory, 32 values of k at a time; tiling decides which chains run together,
// never the order inside one.
#include <cublas_v2.h>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/context.h"
#include "kernels/gemm.h"

namespace flatstate {
namespace {

constexpr int kTileCols = 64;  // threadIdx.x: one output column each
constexpr int kRowGroups = 8;  // threadIdx.y
constexpr int kRowsPerThread = 8;
constexpr int kTileRows = kRowGroups * kRowsPerThread;
constexpr int kTileK = 32;

__global__ void GemmFixedOrder(const float* __restrict__ x, int m, const float* __restrict__ w,
                               int n, int k, float* __restrict__ y, bool accumulate) {
  __shared__ float ws[kTileK][kTileCols + 1];  // w tile, transposed: [kk][column]
  __shared__ float xs[kTileRows][kTileK];      // x tile: [row][kk]
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int tid = ty * kTileCols + tx;
  constexpr int kThreads = kTileCols * kRowGroups;
  const int col0 = blockIdx.x * kTileCols, row0 = blockIdx.y * kTileRows;
  float acc[kRowsPerThread];
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) acc[r] = 0.f;
  for (int k0 = 0; k0 < k; k0 += kTileK) {
    const int kn = min(kTileK, k - k0);
    // Consecutive threads read consecutive k of one row of w / x (coalesced).
    for (int idx = tid; idx < kTileCols * kTileK; idx += kThreads) {
      const int c = idx / kTileK, kk = idx % kTileK;
      const int col = col0 + c;
      ws[kk][c] = (col < n && kk < kn) ? w[static_cast<int64_t>(col) * k + k0 + kk] : 0.f;
    }
    for (int idx = tid; idx < kTileRows * kTileK; idx += kThreads) {
      const int r = idx / kTileK, kk = idx % kTileK;
      const int row = row0 + r;
      xs[r][kk] = (row < m && kk < kn) ? x[static_cast<int64_t>(row) * k + k0 + kk] : 0.f;
    }
    __syncthreads();
    for (int kk = 0; kk < kn; ++kk) {  // only real k: padding never touches a chain
      const float wv = ws[kk][tx];
#pragma unroll
      for (int r = 0; r < kRowsPerThread; ++r) {
        acc[r] = fmaf(xs[ty * kRowsPerThread + r][kk], wv, acc[r]);
      }
    }
    __syncthreads();
  }
  const int col = col0 + tx;
  if (col >= n) return;
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const int row = row0 + ty * kRowsPerThread + r;
    if (row >= m) break;
    float* out = y + static_cast<int64_t>(row) * n + col;
    *out = accumulate ? *out + acc[r] : acc[r];
  }
}

}  // namespace

template <>
absl::StatusOr<GemmWeight<Device::kCuda>> PrepareGemmWeight<Device::kCuda>(
    const float* w, int64_t n, int64_t k, const GemmWeightOptions& options) {
  if (options.dtype != WeightDtype::kF32) {
    return absl::UnimplementedError(
        absl::StrCat(WeightDtypeName(options.dtype),
                     " weights are not implemented on CUDA yet (kernels/gemm_gpu.cu has f32 "
                     "only): use --weight_dtype f32 with --device cuda"));
  }
  GemmWeight<Device::kCuda> gw;
  gw.n = n;
  gw.k = k;
  gw.batch_invariant = options.batch_invariant;
  const size_t bytes = sizeof(float) * static_cast<size_t>(n * k);
  if (absl::Status st = gw.data.Reserve(bytes); !st.ok()) return st;
  if (absl::Status st = CopyToDevice<Device::kCuda>(gw.data.data(), w, bytes); !st.ok()) {
    return st;
  }
  return gw;
}

template <>
void Gemm<Device::kCuda>(const float* x, int64_t m, const GemmWeight<Device::kCuda>& wt, float* y,
                         bool accumulate, const Parallel& /*par*/) {
  const int64_t n = wt.n, k = wt.k;
  if (m <= 0 || n <= 0) return;
  if (wt.batch_invariant) {
    const dim3 grid(static_cast<unsigned>((n + kTileCols - 1) / kTileCols),
                    static_cast<unsigned>((m + kTileRows - 1) / kTileRows));
    GemmFixedOrder<<<grid, dim3(kTileCols, kRowGroups), 0, cuda::Stream()>>>(
        x, static_cast<int>(m), wt.data.as<float>(), static_cast<int>(n), static_cast<int>(k), y,
        accumulate);
    cuda::CheckLaunch("GemmFixedOrder", __FILE__, __LINE__);
    return;
  }
  cublasHandle_t handle = cuda::Blas();
  if (handle == nullptr) return;  // recorded by Blas()
  const float alpha = 1.f, beta = accumulate ? 1.f : 0.f;
  const float* w = wt.data.as<float>();
  // Column-major view: y^T [n x m] = w [n x k] (stored as k x n, so OP_T) * x^T [k x m].
  cuda::RecordCublasError(
      cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                   static_cast<int>(k), &alpha, w, CUDA_R_32F, static_cast<int>(k), x, CUDA_R_32F,
                   static_cast<int>(k), &beta, y, CUDA_R_32F, static_cast<int>(n),
                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "cublasGemmEx", __FILE__, __LINE__);
}

}  // namespace flatstate
