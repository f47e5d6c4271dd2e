// Helpers for running the kernel tests on every Device: arrays that live on the device under test,
// a dispatch macro that calls an op's kCpu or kCuda specialisation, and the skip rule (a device
// whose CheckDevice fails is GTEST_SKIP()ped with the reason, never silently passed).
#ifndef FLATSTATE_TESTS_KERNELS_DEVICE_TEST_UTIL_H_
#define FLATSTATE_TESTS_KERNELS_DEVICE_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/device.h"
#include "kernels/memory.h"

#ifdef FLATSTATE_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/context.h"
// Calls fn<D>(args...) for the runtime device d.
#define FS_ON_DEVICE(d, fn, ...) \
  ((d) == ::flatstate::Device::kCuda ? fn<::flatstate::Device::kCuda>(__VA_ARGS__) \
                                     : fn<::flatstate::Device::kCpu>(__VA_ARGS__))
#else
#define FS_ON_DEVICE(d, fn, ...) fn<::flatstate::Device::kCpu>(__VA_ARGS__)
#endif

namespace flatstate::testing {

inline const std::vector<Device>& AllDevices() {
  static const std::vector<Device> d = {Device::kCpu, Device::kCuda};
  return d;
}

// The devices whose bodies the device-parity tests compare with the CPU body: CUDA only (a cpu
// instance would compare the CPU body with itself and could not fail). Without a GPU they skip,
// naming the reason.
inline const std::vector<Device>& ParityDevices() {
  static const std::vector<Device> d = {Device::kCuda};
  return d;
}

inline std::string DeviceParamName(const ::testing::TestParamInfo<Device>& info) {
  return std::string(DeviceName(info.param));
}

// Use as the first statement of a test (or SetUp): skips, with CheckDevice's reason, when `d` is
// not usable here.
#define FS_SKIP_UNLESS_DEVICE(d)                                                            \
  do {                                                                                      \
    const absl::Status fs_dev_st_ = ::flatstate::CheckDevice(d);                            \
    if (!fs_dev_st_.ok()) {                                                                 \
      GTEST_SKIP() << "no CUDA GPU visible: " << fs_dev_st_.message();                      \
    }                                                                                       \
  } while (0)

// Waits for the device's queued work; the first recorded CUDA error fails the test.
inline void SyncDevice(Device d) {
#ifdef FLATSTATE_HAVE_CUDA
  if (d == Device::kCuda) {
    const absl::Status st = cuda::Synchronize();
    ASSERT_TRUE(st.ok()) << st;
  }
#else
  (void)d;
#endif
}

// An array of T on device d, initialised from a host vector. Not copyable. On CUDA the copies go
// through kernels/memory.h, on the stream the kernels run on: a plain cudaMemcpy from pageable
// memory may return before its DMA lands and is not ordered with that (non-blocking) stream, so
// a kernel could read the array before its contents arrive (DeviceKernels'
// LinearAttentionMatchesCpuForEveryMapAndSplit saw zeros that way on an H200, 2026-11-27 and
// 2026-11-28, with 8 test binaries sharing the GPU).
template <typename T>
class DeviceArray {
 public:
  DeviceArray(Device d, const std::vector<T>& init) : device_(d), host_(init) {
#ifdef FLATSTATE_HAVE_CUDA
    if (d == Device::kCuda) {
      absl::StatusOr<void*> p =
          Allocate<Device::kCuda>(sizeof(T) * (init.empty() ? 1 : init.size()));
      EXPECT_TRUE(p.ok()) << p.status();
      if (p.ok()) dev_ = *p;
      if (dev_ != nullptr && !host_.empty()) {  // host_ outlives the asynchronous copy
        const absl::Status st =
            CopyToDevice<Device::kCuda>(dev_, host_.data(), sizeof(T) * host_.size());
        EXPECT_TRUE(st.ok()) << st;
      }
    }
#endif
  }
  ~DeviceArray() {
#ifdef FLATSTATE_HAVE_CUDA
    Deallocate<Device::kCuda>(dev_);  // waits for queued work first
#endif
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() { return device_ == Device::kCuda ? static_cast<T*>(dev_) : host_.data(); }

  // Synchronises the device and returns the current contents.
  std::vector<T> ToHost() {
#ifdef FLATSTATE_HAVE_CUDA
    if (device_ == Device::kCuda) {
      std::vector<T> out(host_.size());
      if (!out.empty()) {
        const absl::Status st = CopyToHost<Device::kCuda>(out.data(), dev_, sizeof(T) * out.size());
        EXPECT_TRUE(st.ok()) << st;
      }
      SyncDevice(device_);  // the copy is queued after the kernels; wait for both
      return out;
    }
#endif
    return host_;
  }

 private:
  Device device_;
  std::vector<T> host_;
  void* dev_ = nullptr;
};

// Every element of `got` within rel * max(1, max |want|) of `want`'s (infinities equal).
inline void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, double rel,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1;
  for (float v : want) scale = std::max(scale, std::abs(double(v)));
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isinf(want[i])) {
      ASSERT_EQ(got[i], want[i]) << what << " i=" << i;
      continue;
    }
    ASSERT_NEAR(got[i], want[i], rel * scale) << what << " i=" << i;
  }
}

}  // namespace flatstate::testing

#endif  // FLATSTATE_TESTS_KERNELS_DEVICE_TEST_UTIL_H_
