#include "engine/runtime/mixers/mlp.h"

#include "engine/util/status_macros.h"
#include "kernels/elementwise.h"

namespace flatstate {

template <Device D>
absl::Status Mlp<D>::Bind(const ModelConfig& c, const LayerWeights& lw, DeviceWeights<D>* weights) {
  present_ = c.mlp_kind != MlpKind::kNone;
  if (!present_) return absl::OkStatus();
  swiglu_ = c.mlp_kind == MlpKind::kSwiGlu;
  hidden_ = c.hidden_size;
  intermediate_ = c.intermediate_size;
  width_ = intermediate_ * (swiglu_ ? 2 : 1);
  ASSIGN_OR_RETURN(w1_, weights->PrepareGemm(lw.w1));
  ASSIGN_OR_RETURN(w2_, weights->PrepareGemm(lw.w2));
  ASSIGN_OR_RETURN(b1_, weights->Place(lw.b1, width_));
  ASSIGN_OR_RETURN(b2_, weights->Place(lw.b2, hidden_));
  return absl::OkStatus();
}

template <Device D>
void Mlp<D>::Forward(const float* in, int64_t rows, float* scratch, const Parallel& par,
                     float* residual) const {
  float* mid = scratch;
  Gemm<D>(in, rows, w1_, mid, false, par);
  if (b1_ != nullptr) AddBias<D>(mid, b1_, rows, width_);
  const float* down_in = mid;
  if (swiglu_) {
    float* act = mid + rows * width_;
    SwiGlu<D>(mid, rows, intermediate_, act);
    down_in = act;
  } else {
    Gelu<D>(mid, rows * intermediate_);
  }
  Gemm<D>(down_in, rows, w2_, residual, /*accumulate=*/true, par);
  if (b2_ != nullptr) AddBias<D>(residual, b2_, rows, hidden_);
}

template class Mlp<Device::kCpu>;
#ifdef FLATSTATE_HAVE_CUDA
template class Mlp<Device::kCuda>;
#endif

}  // namespace flatstate
