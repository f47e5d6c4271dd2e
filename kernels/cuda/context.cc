#include "kernels/cuda/context.h"

#include <mutex>
#include <string>

#include "kernels/cuda/check.h"

namespace flatstate::cuda {
namespace {

struct Context {
  std::once_flag once;
  absl::Status init_status;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  std::mutex mu;
  absl::Status first_error;  // guarded by mu
};

Context& Ctx() {
  static Context* c = new Context();  // never destroyed: streams outlive static destructors
  return *c;
}

absl::Status DoInit(Context& c) {
  int n = 0;
  CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&n));
  if (n == 0) return absl::UnavailableError("no CUDA GPU is visible (0 devices)");
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
  CUBLAS_RETURN_IF_ERROR(cublasCreate(&c.blas));
  CUBLAS_RETURN_IF_ERROR(cublasSetStream(c.blas, c.stream));
  // fp32 parity: plain FP32 math (CUBLAS_COMPUTE_32F never uses TF32 in this mode).
  CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(c.blas, CUBLAS_DEFAULT_MATH));
  return absl::OkStatus();
}

void Record(absl::Status st) {
  Context& c = Ctx();
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.first_error.ok()) c.first_error = std::move(st);
}

}  // namespace

absl::Status Init() {
  Context& c = Ctx();
  std::call_once(c.once, [&c] { c.init_status = DoInit(c); });
  return c.init_status;
}

cudaStream_t Stream() {
  absl::Status st = Init();
  if (!st.ok()) {
    Record(st);
    return nullptr;
  }
  return Ctx().stream;
}

cublasHandle_t Blas() {
  absl::Status st = Init();
  if (!st.ok()) {
    Record(st);
    return nullptr;
  }
  return Ctx().blas;
}

void RecordCudaError(cudaError_t err, const char* what, const char* file, int line) {
  if (err != cudaSuccess) Record(CudaErrorToStatus(err, what, file, line));
}

void RecordCublasError(cublasStatus_t err, const char* what, const char* file, int line) {
  if (err != CUBLAS_STATUS_SUCCESS) Record(CublasErrorToStatus(err, what, file, line));
}

void CheckLaunch(const char* kernel, const char* file, int line) {
  RecordCudaError(cudaGetLastError(), kernel, file, line);
}

absl::Status TakeError() {
  Context& c = Ctx();
  std::lock_guard<std::mutex> lock(c.mu);
  absl::Status st = std::move(c.first_error);
  c.first_error = absl::OkStatus();
  return st;
}

absl::Status Synchronize() {
  absl::Status init = Init();
  if (!init.ok()) {
    TakeError().IgnoreError();  // the init failure is the error to report
    return init;
  }
  const cudaError_t err = cudaStreamSynchronize(Ctx().stream);
  absl::Status first = TakeError();
  if (!first.ok()) return first;
  return CudaErrorToStatus(err, "cudaStreamSynchronize", __FILE__, __LINE__);
}

}  // namespace flatstate::cuda
