// DeviceBuffer: an owning, growable cudaMalloc'd allocation (never managed memory).
//
// Owns its device memory and frees it in the destructor (cudaFree synchronises the device, so a
// buffer may be destroyed while kernels that used it are still queued). Move-only. Not
// thread-safe. Failures are statuses (ResourceExhausted when the GPU is out of memory); a failed
// Reserve leaves the buffer empty. Only compiled with FLATSTATE_HAVE_CUDA.
#ifndef FLATSTATE_KERNELS_CUDA_DEVICE_BUFFER_H_
#define FLATSTATE_KERNELS_CUDA_DEVICE_BUFFER_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "absl/status/status.h"
#include "kernels/cuda_check.h"

namespace flatstate::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { Free(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      Free();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }

  // Ensures at least `bytes` bytes. Contents are NOT preserved when it grows.
  absl::Status Reserve(size_t bytes) {
    if (bytes <= bytes_) return absl::OkStatus();
    Free();
    void* p = nullptr;
    CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
    ptr_ = p;
    bytes_ = bytes;
    return absl::OkStatus();
  }

  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void Free() {
    if (ptr_ != nullptr) cudaFree(ptr_);  // error ignored: nothing useful to do in a destructor
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace flatstate::cuda

#endif  // FLATSTATE_KERNELS_CUDA_DEVICE_BUFFER_H_
