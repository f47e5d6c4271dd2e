// CUDA body of kernels/gemm.h: y[m, n] = x[m, k] * w[n, k]^T (+ y) through cublasGemmEx with
// CUBLAS_COMPUTE_32F on a handle in CUBLAS_DEFAULT_MATH mode, i.e. plain FP32 (no TF32), so the
// results match the CPU to fp32 rounding. x, y and the weight are device memory; `par` is unused.
//
// Batch invariance on CUDA holds to rounding only: cuBLAS may pick a different kernel (tile
// shape, split-K) for a different m, so a row's floats can change with the batch size. Results
// are deterministic for a given shape (no atomics). See docs/gpu.md.
#include <cublas_v2.h>

#include "kernels/cuda/context.h"
#include "kernels/gemm.h"

namespace flatstate {

template <>
absl::StatusOr<GemmWeight<Device::kCuda>> PrepareGemmWeight<Device::kCuda>(const float* w,
                                                                           int64_t n, int64_t k) {
  GemmWeight<Device::kCuda> gw;
  gw.n = n;
  gw.k = k;
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
