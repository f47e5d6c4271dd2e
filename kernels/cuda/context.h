// The process-wide CUDA context the kCuda kernel bodies run in: one non-blocking stream, one
// cuBLAS handle bound to it (CUBLAS_DEFAULT_MATH with CUBLAS_COMPUTE_32F, i.e. no TF32, so fp32
// parity with the CPU holds), and a sticky "first error" slot.
//
// The kCuda specialisations of the ops in kernels/<op>.h return void like their CPU twins and are
// asynchronous: they enqueue work on Stream() and record any launch/cuBLAS failure here (with
// file and line) instead of crashing. Callers check at their sync points:
//
//   Gemm<Device::kCuda>(...); RmsNorm<Device::kCuda>(...);
//   RETURN_IF_ERROR(cuda::Synchronize());  // waits for the stream, returns the first error
//
// All pointers passed to kCuda ops are device pointers (cudaMalloc'd; no managed memory) unless
// documented otherwise. Thread-safety: initialisation and the error slot are thread-safe; the
// stream is shared, so ops must be enqueued from one thread at a time (the engine loop), like the
// CPU ops' thread-compatibility contract. Only compiled with FLATSTATE_HAVE_CUDA.
#ifndef FLATSTATE_KERNELS_CUDA_CONTEXT_H_
#define FLATSTATE_KERNELS_CUDA_CONTEXT_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "absl/status/status.h"

namespace flatstate::cuda {

// Creates the stream and cuBLAS handle on first use. Fails (and keeps failing) with the CUDA or
// cuBLAS error when no GPU is usable.
absl::Status Init();

// The stream every kCuda op runs on; the legacy default stream (0) if Init failed (the failure is
// recorded and returned by the next Synchronize/TakeError).
cudaStream_t Stream();

// The cuBLAS handle (bound to Stream()); nullptr if Init failed.
cublasHandle_t Blas();

// Records the first failure since the last TakeError (later ones are dropped). `what` names the
// call; `code` is the numeric error. Never blocks on the GPU.
void RecordCudaError(cudaError_t err, const char* what, const char* file, int line);
void RecordCublasError(cublasStatus_t err, const char* what, const char* file, int line);

// Checks cudaGetLastError() after a kernel launch and records a failure.
void CheckLaunch(const char* kernel, const char* file, int line);

// Returns and clears the first recorded failure (OK when none).
absl::Status TakeError();

// Waits for Stream() and returns the first failure recorded or raised so far (then cleared).
absl::Status Synchronize();

}  // namespace flatstate::cuda

#define FS_CUDA_CHECK_LAUNCH(name) ::flatstate::cuda::CheckLaunch(name, __FILE__, __LINE__)

#endif  // FLATSTATE_KERNELS_CUDA_CONTEXT_H_
