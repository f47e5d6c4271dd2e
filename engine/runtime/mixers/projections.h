// The projections that surround attention-style mixers: QkvProjection (optional causal conv
// token shift, the fused q|k|v(|extra) GEMM, its bias, and per-head q/k RMSNorm) and
// OutProjection (the output GEMM accumulated into the residual, and its bias).
//
// Each owns nothing but handles to weights held by a DeviceWeights<D> (which must outlive it);
// thread-compatible. Apply enqueues kernels and cannot fail (device errors surface at the loop's
// next Synchronize).
#ifndef FLATSTATE_ENGINE_RUNTIME_MIXERS_PROJECTIONS_H_
#define FLATSTATE_ENGINE_RUNTIME_MIXERS_PROJECTIONS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"
#include "engine/runtime/device_weights.h"
#include "engine/runtime/mixers/token_mixer.h"
#include "kernels/device.h"
#include "kernels/gemm.h"

namespace flatstate {

template <Device D>
struct QkvProjection {
  const float* conv = nullptr;    // [conv_kernel_size, hidden] (null: no token shift)
  int64_t conv_offset = 0;        // the conv window's floats in a session's state
  GemmWeight<D> w;                // [width, hidden]
  const float* bias = nullptr;    // [width] (null: none)
  const float* q_norm = nullptr;  // [head_dim] (null: none; then k_norm is null too)
  const float* k_norm = nullptr;
  int64_t width = 0;  // floats per output row

  // Binds everything but `w` (which the mixer prepares: it may fuse extra rows into it).
  absl::Status BindVectors(const ModelConfig& c, int layer, const LayerWeights& lw,
                           const StateLayout& layout, DeviceWeights<D>* weights);
  // Floats of scratch Apply needs for `rows` rows (the conv's output).
  int64_t ScratchFloats(const ModelConfig& c, int64_t rows) const {
    return conv != nullptr ? rows * c.hidden_size : 0;
  }
  // out [rows, width] = (conv(in)) w^T + bias, q and k heads normalised.
  void Apply(const ModelConfig& c, const float* in, const MixerStep<D>& step, float* scratch,
             float* out) const;
};

template <Device D>
struct OutProjection {
  GemmWeight<D> w;  // [hidden, in width]
  const float* bias = nullptr;

  absl::Status Bind(const ModelConfig& c, const LayerWeights& lw, DeviceWeights<D>* weights);
  // residual [rows, hidden] += in w^T + bias.
  void Apply(const ModelConfig& c, const float* in, int64_t rows, const Parallel& par,
             float* residual) const;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_RUNTIME_MIXERS_PROJECTIONS_H_
