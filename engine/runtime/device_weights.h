// DeviceWeights<D>: a model's tensors prepared where D's kernels read them. GEMM weights as
// GemmWeightOptions::dtype asks (PrepareGemm: an F32 file through PrepareGemmWeight<D>, a BF16
// file through PrepareGemmWeightBf16<D>, an int8 / int4 file through PrepareGemmWeightQuantized<D>
// with its quants and scales as they are; CPU: packed panels, quantised for bf16/int8/int4; CUDA:
// device copies), every other tensor (embeddings, norms, biases, conv, feature projections) as
// f32 through Place: used in place where D's memory is host memory, else copied to the device.
//
// Owns the device copies it makes (they live as long as it does); borrows the Model's host
// tensors, which must outlive it. Not thread-safe (built once at DeviceForward<D>::Create).
// Failures: the device's allocation and copy errors; CheckQuantizedTarget's InvalidArgument
// for an int8 / int4 file run as a type it cannot be converted to.
#ifndef FLATSTATE_ENGINE_RUNTIME_DEVICE_WEIGHTS_H_
#define FLATSTATE_ENGINE_RUNTIME_DEVICE_WEIGHTS_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"
#include "kernels/device.h"
#include "kernels/gemm.h"
#include "kernels/memory.h"

namespace flatstate {

template <Device D>
class DeviceWeights {
 public:
  // `dtype`: the file's torch_dtype (int8 / int4 files keep their quants); `gemm`: how GEMM
  // weights are prepared.
  DeviceWeights(TorchDtype dtype, const GemmWeightOptions& gemm);

  const GemmWeightOptions& gemm() const { return gemm_; }
  // The stored quantisation of an int8 / int4 file.
  WeightDtype stored() const { return stored_; }
  QuantizedWeightView Quants(const GemmTensor& t) const {
    return QuantizedWeightView{stored_, t.q, t.scale, t.n, t.k};
  }

  // `count` elements of host tensor `host` where D's ops can read it (null stays null).
  template <typename T>
  absl::StatusOr<const T*> Place(const T* host, int64_t count) {
    if constexpr (kHostMemory<D>) {
      return host;
    } else {
      if (host == nullptr || count <= 0) return static_cast<const T*>(nullptr);
      const size_t bytes = sizeof(T) * static_cast<size_t>(count);
      Buffer<D> b;
      if (absl::Status st = b.Reserve(bytes); !st.ok()) return st;
      if (absl::Status st = CopyToDevice<D>(b.data(), host, bytes); !st.ok()) return st;
      const T* p = b.template as<T>();
      placed_.push_back(std::move(b));
      return p;
    }
  }
  // A layer GEMM weight as the file stores it (F32 or BF16: PrepareGemmWeightBf16 gives the
  // weight PrepareGemmWeight would from the widened values, and a bf16 engine uses the bits as
  // stored; int8 / int4: the stored quants and scales as they are).
  absl::StatusOr<GemmWeight<D>> PrepareGemm(const GemmTensor& t) const;
  // An fp32 [n, k] matrix made at bind time (a fused weight); `w` may die once this returns.
  absl::StatusOr<GemmWeight<D>> PrepareF32(const float* w, int64_t n, int64_t k) const;

 private:
  GemmWeightOptions gemm_;
  WeightDtype stored_;
  std::vector<Buffer<D>> placed_;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_RUNTIME_DEVICE_WEIGHTS_H_
