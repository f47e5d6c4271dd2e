// CUDA and cuBLAS error checking: every failing runtime or cuBLAS call becomes an absl::Status
// naming the call, the error and the file:line it was made at. Only for code compiled with the
// CUDA backend (FLATSTATE_HAVE_CUDA); host code (.cc) and device code (.cu) may both include it.
//
//   CUDA_RETURN_IF_ERROR(cudaMalloc(&p, n));     // returns the status from the enclosing function
//   CUBLAS_RETURN_IF_ERROR(cublasCreate(&h));
//
// Out-of-memory (cudaErrorMemoryAllocation, CUBLAS_STATUS_ALLOC_FAILED) maps to
// ResourceExhausted; "no device" errors to Unavailable; everything else to Internal.
// Thread-safe (pure functions).
#ifndef FLATSTATE_KERNELS_CUDA_CHECK_H_
#define FLATSTATE_KERNELS_CUDA_CHECK_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace flatstate {

inline absl::Status CudaErrorToStatus(cudaError_t err, const char* expr, const char* file,
                                      int line) {
  if (err == cudaSuccess) return absl::OkStatus();
  const std::string msg = absl::StrCat(file, ":", line, ": ", expr, " failed: ",
                                       cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
  switch (err) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(msg);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
      return absl::UnavailableError(msg);
    default:
      return absl::InternalError(msg);
  }
}

inline absl::Status CublasErrorToStatus(cublasStatus_t err, const char* expr, const char* file,
                                        int line) {
  if (err == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const std::string msg = absl::StrCat(file, ":", line, ": ", expr, " failed: ",
                                       cublasGetStatusName(err), " (",
                                       cublasGetStatusString(err), ")");
  if (err == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

}  // namespace flatstate

#define CUDA_RETURN_IF_ERROR(expr)                                                          \
  do {                                                                                      \
    const cudaError_t fs_cuda_err_ = (expr);                                                \
    if (fs_cuda_err_ != cudaSuccess) {                                                      \
      return ::flatstate::CudaErrorToStatus(fs_cuda_err_, #expr, __FILE__, __LINE__);       \
    }                                                                                       \
  } while (0)

#define CUBLAS_RETURN_IF_ERROR(expr)                                                        \
  do {                                                                                      \
    const cublasStatus_t fs_cublas_err_ = (expr);                                           \
    if (fs_cublas_err_ != CUBLAS_STATUS_SUCCESS) {                                          \
      return ::flatstate::CublasErrorToStatus(fs_cublas_err_, #expr, __FILE__, __LINE__);   \
    }                                                                                       \
  } while (0)

#endif  // FLATSTATE_KERNELS_CUDA_CHECK_H_
