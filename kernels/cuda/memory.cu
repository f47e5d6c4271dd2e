// kCuda bodies of kernels/memory.h: cudaMalloc'd memory, stream-ordered copies on cuda::Stream().
#include <cuda_runtime.h>

#include "kernels/cuda/context.h"
#include "kernels/cuda/check.h"
#include "kernels/memory.h"

namespace flatstate {

template <>
absl::StatusOr<void*> Allocate<Device::kCuda>(size_t bytes) {
  void* p = nullptr;
  CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
  return p;
}

template <>
void Deallocate<Device::kCuda>(void* p) {
  if (p != nullptr) cudaFree(p);  // error ignored: nothing useful to do when freeing
}

template <>
absl::Status CopyToDevice<Device::kCuda>(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cuda::Stream()));
  return absl::OkStatus();
}

template <>
absl::Status CopyToHost<Device::kCuda>(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cuda::Stream()));
  return absl::OkStatus();
}

template <>
absl::Status Synchronize<Device::kCuda>() {
  return cuda::Synchronize();
}

template <>
absl::Status TakeError<Device::kCuda>() {
  return cuda::TakeError();
}

template <>
absl::StatusOr<DeviceMemoryInfo> QueryDeviceMemory<Device::kCuda>() {
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  return DeviceMemoryInfo{total_bytes - free_bytes, total_bytes};
}

}  // namespace flatstate
