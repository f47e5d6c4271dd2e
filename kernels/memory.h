// Memory of the device a kernel runs on: allocation, host <-> device copies and synchronisation,
// declared once for every Device, and Buffer<D>, the one owning buffer type over them.
//
// kCpu: device memory IS host memory (kHostMemory<kCpu>); copies are memcpy and finish before
// they return; Synchronize and TakeError are OK. Callers use host memory in place there (the
// forward pass passes session state and the KV pool to the ops directly, no staging).
// kCuda: cudaMalloc'd memory (never managed memory); copies are enqueued on cuda::Stream()
// (kernels/cuda/context.h) and complete at the next Synchronize, so a copy's host buffer must
// stay valid and unchanged until then; the bodies are in cuda/memory.cu, compiled only with
// FLATSTATE_HAVE_CUDA.
//
// Failures are statuses: ResourceExhausted when memory runs out, the CUDA error otherwise.
// Thread-compatible: one thread at a time enqueues work on a device (the engine loop).
#ifndef FLATSTATE_KERNELS_MEMORY_H_
#define FLATSTATE_KERNELS_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/device.h"

namespace flatstate {

// True when D's memory is host memory, so host pointers can be passed to D's ops as they are.
template <Device D>
inline constexpr bool kHostMemory = D == Device::kCpu;

// Allocates `bytes` (> 0) of D's memory, 64-byte aligned, uninitialised.
template <Device D>
absl::StatusOr<void*> Allocate(size_t bytes);
// Frees what Allocate<D> returned (nullptr is ignored). kCuda: waits for queued work first.
template <Device D>
void Deallocate(void* p);
// host -> D and D -> host copies of `bytes` bytes (see the top of this file for ordering).
template <Device D>
absl::Status CopyToDevice(void* dst, const void* src, size_t bytes);
template <Device D>
absl::Status CopyToHost(void* dst, const void* src, size_t bytes);
// Waits for D's queued work and returns the first failure recorded since the last call.
template <Device D>
absl::Status Synchronize();
// Returns (and clears) the first failure recorded by D's asynchronous ops without waiting, so a
// stale failure is not blamed on new work.
template <Device D>
absl::Status TakeError();

// The memory of the device D runs on, as the driver reports it for the whole device (every
// process's allocations count, the CUDA context's own included).
struct DeviceMemoryInfo {
  uint64_t used_bytes = 0;
  uint64_t total_bytes = 0;
};
// kCpu: {0, 0}, since D's memory is host memory (see the process's RSS instead). kCuda:
// cudaMemGetInfo on the current device; fails with the CUDA error.
template <Device D>
absl::StatusOr<DeviceMemoryInfo> QueryDeviceMemory();

// An owning, growable allocation of D's memory. Move-only; not thread-safe. A failed Reserve
// leaves the buffer empty.
template <Device D>
class Buffer {
 public:
  Buffer() = default;
  ~Buffer() { Deallocate<D>(ptr_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      Deallocate<D>(ptr_);
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }

  // Ensures at least `bytes` bytes. Contents are NOT preserved when it grows.
  absl::Status Reserve(size_t bytes) {
    if (bytes <= bytes_) return absl::OkStatus();
    Deallocate<D>(std::exchange(ptr_, nullptr));
    bytes_ = 0;
    absl::StatusOr<void*> p = Allocate<D>(bytes);
    if (!p.ok()) return p.status();
    ptr_ = *p;
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
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// `host` as D's ops can read it: the host array itself where D's memory is host memory, else a
// copy in `buf` (grown as needed; `host` must not change until the next Synchronize<D>).
template <Device D, typename T>
absl::StatusOr<T*> OnDevice(Buffer<D>* buf, std::vector<T>& host) {
  if constexpr (kHostMemory<D>) {
    return host.data();
  } else {
    if (host.empty()) return static_cast<T*>(nullptr);
    const size_t bytes = sizeof(T) * host.size();
    if (absl::Status st = buf->Reserve(bytes); !st.ok()) return st;
    if (absl::Status st = CopyToDevice<D>(buf->data(), host.data(), bytes); !st.ok()) return st;
    return buf->template as<T>();
  }
}

}  // namespace flatstate

#endif  // FLATSTATE_KERNELS_MEMORY_H_
