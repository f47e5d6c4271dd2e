#include "engine/runtime/device_weights.h"

#include "engine/util/status_macros.h"

namespace flatstate {

template <Device D>
DeviceWeights<D>::DeviceWeights(TorchDtype dtype, const GemmWeightOptions& gemm)
    : gemm_(gemm), stored_(dtype == TorchDtype::kInt4 ? WeightDtype::kInt4 : WeightDtype::kInt8) {}

template <Device D>
absl::StatusOr<GemmWeight<D>> DeviceWeights<D>::PrepareGemm(const GemmTensor& t) const {
  if (t.q != nullptr) {
    RETURN_IF_ERROR(CheckQuantizedTarget({stored_}, gemm_.dtype));
    return PrepareGemmWeightQuantized<D>(Quants(t), gemm_);
  }
  return t.bf16 != nullptr ? PrepareGemmWeightBf16<D>(t.bf16, t.n, t.k, gemm_)
                           : PrepareGemmWeight<D>(t.f32, t.n, t.k, gemm_);
}

template <Device D>
absl::StatusOr<GemmWeight<D>> DeviceWeights<D>::PrepareF32(const float* w, int64_t n,
                                                           int64_t k) const {
  ASSIGN_OR_RETURN(GemmWeight<D> out, PrepareGemmWeight<D>(w, n, k, gemm_));
  RETURN_IF_ERROR(Synchronize<D>());  // the caller's buffer may die; the copy must be complete
  return out;
}

template class DeviceWeights<Device::kCpu>;
#ifdef FLATSTATE_HAVE_CUDA
template class DeviceWeights<Device::kCuda>;
#endif

}  // namespace flatstate
