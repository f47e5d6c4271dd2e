#include "kernels/device.h"

#include <string>

#include "absl/strings/str_cat.h"

#ifdef FLATSTATE_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace flatstate {

absl::string_view DeviceName(Device d) { return d == Device::kCuda ? "cuda" : "cpu"; }

bool CudaCompiledIn() {
#ifdef FLATSTATE_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

absl::Status CheckDevice(Device d) {
  if (d == Device::kCpu) return absl::OkStatus();
#ifdef FLATSTATE_HAVE_CUDA
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    return absl::UnavailableError(absl::StrCat(
        "device cuda: no CUDA GPU is visible (", err == cudaSuccess ? "0 devices" :
        cudaGetErrorString(err), ")"));
  }
  return absl::OkStatus();
#else
  return absl::FailedPreconditionError(
      "device cuda: this build has no CUDA backend (nvcc was not found at configure time)");
#endif
}

absl::StatusOr<Device> ParseDevice(absl::string_view name) {
  if (name == "cpu") return Device::kCpu;
  if (name == "cuda") return Device::kCuda;
  if (name == "auto") return CheckDevice(Device::kCuda).ok() ? Device::kCuda : Device::kCpu;
  return absl::InvalidArgumentError(
      absl::StrCat("device: unknown value '", name, "' (expected auto, cpu or cuda)"));
}

}  // namespace flatstate
