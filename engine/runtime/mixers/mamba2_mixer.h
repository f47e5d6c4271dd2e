// Mamba2Mixer<D>: a Mamba-2 layer (transformers Mamba2Mixer; engine/arch/mamba2_arch.h):
//   xBC = silu(conv(x Wxbc^T) + conv_bias)   depthwise causal conv, K taps, window in the state
//   z | dt_raw = x Wzdt^T;  dt = clamp(softplus(dt_raw + dt_bias));  g = -exp(A_log) dt
//   y = scan(q = C, k = B, v = dt x, g) + D x   (kernels/gated_linear.h with one decay per head:
//       S <- exp(g) S + B (dt x)^T, y = S^T C; head h reads B / C group h / (heads / groups);
//       recurrent for 1-token runs, chunked on the absolute chunk grid otherwise)
//   residual += (RMSNorm_groups(y * silu(z)) * w) Wo^T   (norm over inner / groups floats)
// State per session and layer (StateLayout, ModelConfig::ssm): S [heads][N][head_dim], then the
// conv window [K-1][conv_dim]. Shares the gated linear recurrence with GLA and the conv and
// SiLU ops with the Gated DeltaNet mixer.
//
// Owns handles to weights held by the DeviceWeights<D> it was created with; not thread-safe. See
// token_mixer.h for how creation and Forward fail.
#ifndef FLATSTATE_ENGINE_RUNTIME_MIXERS_MAMBA2_MIXER_H_
#define FLATSTATE_ENGINE_RUNTIME_MIXERS_MAMBA2_MIXER_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "engine/runtime/mixers/projections.h"
#include "engine/runtime/mixers/token_mixer.h"

namespace flatstate {

template <Device D>
class Mamba2Mixer final : public TokenMixer<D> {
 public:
  static absl::StatusOr<std::unique_ptr<Mamba2Mixer>> Create(int layer, const LayerWeights& lw,
                                                             const MixerResources<D>& res,
                                                             DeviceWeights<D>* weights);
  int64_t ScratchFloats(int64_t rows) const override;
  void Forward(const float* in, float* residual, const MixerStep<D>& step) override;

 private:
  explicit Mamba2Mixer(const MixerResources<D>& res) : res_(res) {}

  MixerResources<D> res_;
  LayerStateLayout lay_;
  GemmWeight<D> wxbc_, wzdt_;
  const float* conv_ = nullptr;
  const float* conv_bias_ = nullptr;  // null: none
  const float* A_log_ = nullptr;
  const float* dt_bias_ = nullptr;
  const float* D_ = nullptr;
  const float* norm_ = nullptr;
  OutProjection<D> out_;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_RUNTIME_MIXERS_MAMBA2_MIXER_H_
