// GatedDeltaNetMixer<D>: the Gated DeltaNet layers of Qwen3.5 (engine/arch/qwen35_arch.h):
//   qkv = silu(conv(x Wqkv^T))   depthwise causal conv, K taps, window in the session's state
//   z | b | a = x Wzba^T;  g = -exp(A_log) softplus(a + dt_bias);  beta = sigmoid(b)
//   o = GatedDeltaRule(q, k, v, g, beta)   (kernels/gated_delta.h: q, k L2-normalised, q scaled
//       by key_dim^-0.5, the session's S per value head; recurrent for 1-token runs, chunked on
//       the absolute chunk grid otherwise)
//   residual += (RMSNorm(o) * w * silu(z)) Wo^T   (per value head)
// State per session and layer (StateLayout, ModelConfig::delta): S [Hv][dk][dv], then the conv
// window [K-1][conv_dim].
//
// Owns handles to weights held by the DeviceWeights<D> it was created with; not thread-safe. See
// token_mixer.h for how creation and Forward fail.
#ifndef FLATSTATE_ENGINE_RUNTIME_MIXERS_GATED_DELTANET_MIXER_H_
#define FLATSTATE_ENGINE_RUNTIME_MIXERS_GATED_DELTANET_MIXER_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "engine/runtime/mixers/projections.h"
#include "engine/runtime/mixers/token_mixer.h"

namespace flatstate {

template <Device D>
class GatedDeltaNetMixer final : public TokenMixer<D> {
 public:
  static absl::StatusOr<std::unique_ptr<GatedDeltaNetMixer>> Create(int layer,
                                                                    const LayerWeights& lw,
                                                                    const MixerResources<D>& res,
                                                                    DeviceWeights<D>* weights);
  int64_t ScratchFloats(int64_t rows) const override;
  void Forward(const float* in, float* residual, const MixerStep<D>& step) override;

 private:
  explicit GatedDeltaNetMixer(const MixerResources<D>& res) : res_(res) {}

  MixerResources<D> res_;
  LayerStateLayout lay_;
  GemmWeight<D> wqkv_, wzba_;
  const float* conv_ = nullptr;
  const float* A_log_ = nullptr;
  const float* dt_bias_ = nullptr;
  const float* norm_ = nullptr;
  OutProjection<D> out_;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_RUNTIME_MIXERS_GATED_DELTANET_MIXER_H_
