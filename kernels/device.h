// Devices a kernel can run on, and the dispatcher's availability check.
//
// Each op is declared once in kernels/<op>.h as `template <Device D> ...`; its CPU body is the
// kCpu specialisation in cpu/<op>.cc and its CUDA body the kCuda specialisation in cuda/<op>.cu,
// which is compiled only when the build found nvcc (FLATSTATE_HAVE_CUDA). Callers check a device
// once with CheckDevice before using it: a device that was not compiled in, or that has no visible
// GPU, is a FailedPrecondition/Unavailable status, never a crash or a link error.
#ifndef FLATSTATE_KERNELS_DEVICE_H_
#define FLATSTATE_KERNELS_DEVICE_H_

#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Marks inline helpers that the CPU bodies and the CUDA bodies share (one expression for both).
#ifdef __CUDACC__
#define FS_HOST_DEVICE __host__ __device__
#else
#define FS_HOST_DEVICE
#endif

namespace flatstate {

enum class Device { kCpu, kCuda };

absl::string_view DeviceName(Device d);  // "cpu" | "cuda"

// Parses --device values: "cpu", "cuda", or "auto" (cuda when compiled in and a GPU is visible).
absl::StatusOr<Device> ParseDevice(absl::string_view name);

// OK when kernels for `d` are compiled in and usable on this machine.
absl::Status CheckDevice(Device d);

// True when this binary was built with the CUDA backend.
bool CudaCompiledIn();

}  // namespace flatstate

#endif  // FLATSTATE_KERNELS_DEVICE_H_
