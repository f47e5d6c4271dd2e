// kCpu bodies of kernels/memory.h: host memory.
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/memory.h"

namespace flatstate {

template <>
absl::StatusOr<void*> Allocate<Device::kCpu>(size_t bytes) {
  // aligned_alloc wants a size that is a multiple of the alignment.
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("out of host memory allocating ", bytes,
                                                     " bytes"));
  }
  return p;
}

template <>
void Deallocate<Device::kCpu>(void* p) {
  std::free(p);
}

template <>
absl::Status CopyToDevice<Device::kCpu>(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
  return absl::OkStatus();
}

template <>
absl::Status CopyToHost<Device::kCpu>(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
  return absl::OkStatus();
}

template <>
absl::Status Synchronize<Device::kCpu>() {
  return absl::OkStatus();
}

template <>
absl::Status TakeError<Device::kCpu>() {
  return absl::OkStatus();
}

template <>
absl::StatusOr<DeviceMemoryInfo> QueryDeviceMemory<Device::kCpu>() {
  return DeviceMemoryInfo{};
}

}  // namespace flatstate
