#include "engine/runtime/mixers/projections.h"

#include "engine/util/status_macros.h"
#include "kernels/elementwise.h"

namespace flatstate {

template <Device D>
absl::Status QkvProjection<D>::BindVectors(const ModelConfig& c, int layer, const LayerWeights& lw,
                                           const StateLayout& layout, DeviceWeights<D>* weights) {
  const int64_t hidden = c.hidden_size;
  ASSIGN_OR_RETURN(conv, weights->Place(lw.conv, int64_t{c.conv_kernel_size} * hidden));
  if (conv != nullptr) {
    const LayerStateLayout& lay = layout.layers[layer];
    conv_offset = static_cast<int64_t>(lay.begin + lay.conv);
  }
  ASSIGN_OR_RETURN(bias, weights->Place(lw.bqkv, width));
  ASSIGN_OR_RETURN(q_norm, weights->Place(lw.q_norm, c.head_dim));
  ASSIGN_OR_RETURN(k_norm, weights->Place(lw.k_norm, c.head_dim));
  return absl::OkStatus();
}

template <Device D>
void QkvProjection<D>::Apply(const ModelConfig& c, const float* in, const MixerStep<D>& step,
                             float* scratch, float* out) const {
  const DeviceStep<D>& s = *step.step;
  const int64_t N = s.rows;
  if (conv != nullptr) {
    CausalConv<D>(in, c.hidden_size, c.conv_kernel_size, conv, s.conv.on,
                  static_cast<int>(s.conv.host.size()), conv_offset, scratch);
    in = scratch;
  }
  Gemm<D>(in, N, w, out, false, *step.pool);
  if (bias != nullptr) AddBias<D>(out, bias, N, width);
  if (q_norm != nullptr) {  // Qwen3: each q and k head normalised before RoPE
    const float eps = c.rms_norm_eps;
    HeadRmsNorm<D>(out, N, width, c.num_attention_heads, c.head_dim, q_norm, eps);
    HeadRmsNorm<D>(out + c.q_dim(), N, width, c.kv_heads(), c.head_dim, k_norm, eps);
  }
}

template <Device D>
absl::Status OutProjection<D>::Bind(const ModelConfig& c, const LayerWeights& lw,
                                    DeviceWeights<D>* weights) {
  ASSIGN_OR_RETURN(w, weights->PrepareGemm(lw.wo));
  ASSIGN_OR_RETURN(bias, weights->Place(lw.bo, c.hidden_size));
  return absl::OkStatus();
}

template <Device D>
void OutProjection<D>::Apply(const ModelConfig& c, const float* in, int64_t rows,
                             const Parallel& par, float* residual) const {
  Gemm<D>(in, rows, w, residual, /*accumulate=*/true, par);
  if (bias != nullptr) AddBias<D>(residual, bias, rows, c.hidden_size);
}

template struct QkvProjection<Device::kCpu>;
template struct OutProjection<Device::kCpu>;
#ifdef FLATSTATE_HAVE_CUDA
template struct QkvProjection<Device::kCuda>;
template struct OutProjection<Device::kCuda>;
#endif

}  // namespace flatstate
