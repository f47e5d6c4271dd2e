#include "engine/runtime/mixers/mlp.h"

#include "engine/util/status_macros.h"
#include "kernels/elementwise.h"
#include "kernels/rwkv7.h"

namespace flatstate {

template <Device D>
absl::Status Mlp<D>::Bind(const ModelConfig& c, const LayerWeights& lw,
                          const LayerStateLayout& layer, DeviceWeights<D>* weights) {
  present_ = c.mlp_kind != MlpKind::kNone;
  if (!present_) return absl::OkStatus();
  swiglu_ = c.mlp_kind == MlpKind::kSwiGlu;
  relu2_ = c.mlp_kind == MlpKind::kReluSquaredShift;
  hidden_ = c.hidden_size;
  if (relu2_) {
    // out = mu * x_prev + (1 - mu) * x: the conv's taps over [previous row; this row].
    shift_taps_.resize(static_cast<size_t>(2 * hidden_));
    for (int64_t i = 0; i < hidden_; ++i) {
      shift_taps_[2 * i] = lw.mlp_mix[i];
      shift_taps_[2 * i + 1] = 1.f - lw.mlp_mix[i];
    }
    ASSIGN_OR_RETURN(shift_, weights->Place(shift_taps_.data(), 2 * hidden_));
    shift_offset_ = static_cast<int64_t>(layer.begin + layer.ffn_shift);
  }
  intermediate_ = c.intermediate_size;
  width_ = intermediate_ * (swiglu_ ? 2 : 1);
  ASSIGN_OR_RETURN(w1_, weights->PrepareGemm(lw.w1));
  ASSIGN_OR_RETURN(w2_, weights->PrepareGemm(lw.w2));
  ASSIGN_OR_RETURN(b1_, weights->Place(lw.b1, width_));
  ASSIGN_OR_RETURN(b2_, weights->Place(lw.b2, hidden_));
  return absl::OkStatus();
}

template <Device D>
void Mlp<D>::Forward(const float* in, const MixerStep<D>& step, float* residual) const {
  const DeviceStep<D>& s = *step.step;
  const Parallel& par = *step.pool;
  const int64_t rows = s.rows;
  float* mid = step.scratch;
  if (relu2_) {
    float* xk = mid + rows * width_;
    CausalConv<D>(in, hidden_, 2, shift_, s.conv.on, static_cast<int>(s.conv.host.size()),
                  shift_offset_, xk);
    Gemm<D>(xk, rows, w1_, mid, false, par);
    step.ForRows(rows, rows * intermediate_ * kElementWork, [&](int64_t r0, int64_t r1) {
      ActivateRows<D>(mid + r0 * intermediate_, r1 - r0, intermediate_, Activation::kReluSquared);
    });
    Gemm<D>(mid, rows, w2_, residual, /*accumulate=*/true, par);
    return;
  }
  Gemm<D>(in, rows, w1_, mid, false, par);
  if (b1_ != nullptr) AddBias<D>(mid, b1_, rows, width_);
  const float* down_in = mid;
  if (swiglu_) {
    float* act = mid + rows * width_;
    step.ForRows(rows, rows * intermediate_ * kElementWork, [&](int64_t r0, int64_t r1) {
      SwiGlu<D>(mid + r0 * width_, r1 - r0, intermediate_, act + r0 * intermediate_);
    });
    down_in = act;
  } else {
    step.ForRows(rows, rows * intermediate_ * kElementWork, [&](int64_t r0, int64_t r1) {
      Gelu<D>(mid + r0 * intermediate_, (r1 - r0) * intermediate_);
    });
  }
  Gemm<D>(down_in, rows, w2_, residual, /*accumulate=*/true, par);
  if (b2_ != nullptr) AddBias<D>(residual, b2_, rows, hidden_);
}

template class Mlp<Device::kCpu>;
#ifdef FLATSTATE_HAVE_CUDA
template class Mlp<Device::kCuda>;
#endif

}  // namespace flatstate
