// GlaMixer<D>: a Gated Linear Attention layer in fla's layout (fla/layers/gla.py
// GatedLinearAttention; engine/arch/gla_arch.h):
//   qkv = x Wqkv^T (q | k | v, every head its own k and v rows: fla's kv groups expanded at load)
//   with short convolutions: qkv = silu(conv(qkv))  depthwise causal, K taps, window in the state
//   gk = max(logsigmoid((x Wgk1^T) Wgk2^T + b) / gate_normalizer, clamp_min)   per key channel
//   o = GatedLinear(q, k, v, gk)  (kernels/gated_linear.h, per-key decay, q scaled by
//       key_dim^-0.5, the session's S per head; recurrent for 1-token runs, chunked on the
//       absolute chunk grid otherwise)
//   output gate: o = RMSNorm(o) * w * silu(x Wg^T) per head; else o = RMSNorm(o) * w
//   residual += o Wo^T
// State per session and layer (StateLayout, ModelConfig::gla): S [heads][key_dim][value_dim],
// then, with short convolutions, the conv window [K-1][qkv_dim].
//
// Owns handles to weights held by the DeviceWeights<D> it was created with; not thread-safe. See
// token_mixer.h for how creation and Forward fail.
#ifndef FLATSTATE_ENGINE_RUNTIME_MIXERS_GLA_MIXER_H_
#define FLATSTATE_ENGINE_RUNTIME_MIXERS_GLA_MIXER_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "engine/runtime/mixers/projections.h"
#include "engine/runtime/mixers/token_mixer.h"

namespace flatstate {

template <Device D>
class GlaMixer final : public TokenMixer<D> {
 public:
  static absl::StatusOr<std::unique_ptr<GlaMixer>> Create(int layer, const LayerWeights& lw,
                                                          const MixerResources<D>& res,
                                                          DeviceWeights<D>* weights);
  int64_t ScratchFloats(int64_t rows) const override;
  void Forward(const float* in, float* residual, const MixerStep<D>& step) override;

 private:
  explicit GlaMixer(const MixerResources<D>& res) : res_(res) {}

  MixerResources<D> res_;
  LayerStateLayout lay_;
  GemmWeight<D> wqkv_, wg_, wgk1_, wgk2_;  // wg_: only with the output gate
  const float* conv_ = nullptr;            // null: no short convolution
  const float* gk_bias_ = nullptr;
  const float* norm_ = nullptr;
  OutProjection<D> out_;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_RUNTIME_MIXERS_GLA_MIXER_H_
