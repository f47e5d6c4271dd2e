// DeltaNetMixer<D>: fla's DeltaNet layer (fla/layers/delta_net.py DeltaNet; engine/arch/
// delta_net_arch.h): the gated delta rule without decay.
//   qkv = x Wqkv^T (q | k | v); with short convolutions qkv = conv(qkv) (depthwise causal, K taps,
//     window in the session's state); then silu on v, and on q and k when DeltaNetShape::qk_silu
//   z | b = x Wzba^T (z: the output gate, when output_gate; b: when use_beta)
//   beta = beta_scale * sigmoid(b) (use_beta false: beta_scale)
//   o = GatedDeltaRule(q, k, v, g = 0, beta) (kernels/gated_delta.h: q, k L2-normalised, q scaled
//       by key_dim^-0.5, the session's S per head; recurrent for 1-token runs, chunked on the
//       absolute chunk grid otherwise)
//   output gate: o = RMSNorm(o) * w * silu(z) per head; else o = RMSNorm(o) * w
//   residual += o Wo^T
// State per session and layer (StateLayout, ModelConfig::delta): S [H][dk][dv], then, with short
// convolutions, the conv window [K-1][conv_dim].
//
// Owns handles to weights held by the DeviceWeights<D> it was created with; not thread-safe. See
// token_mixer.h for how creation and Forward fail.
#ifndef FLATSTATE_ENGINE_RUNTIME_MIXERS_DELTA_NET_MIXER_H_
#define FLATSTATE_ENGINE_RUNTIME_MIXERS_DELTA_NET_MIXER_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "engine/runtime/mixers/projections.h"
#include "engine/runtime/mixers/token_mixer.h"

namespace flatstate {

template <Device D>
class DeltaNetMixer final : public TokenMixer<D> {
 public:
  static absl::StatusOr<std::unique_ptr<DeltaNetMixer>> Create(int layer, const LayerWeights& lw,
                                                               const MixerResources<D>& res,
                                                               DeviceWeights<D>* weights);
  int64_t ScratchFloats(int64_t rows) const override;
  void Forward(const float* in, float* residual, const MixerStep<D>& step) override;

 private:
  explicit DeltaNetMixer(const MixerResources<D>& res) : res_(res) {}
  // Floats per row of z | b (0: no such GEMM).
  int64_t zb_width() const;

  MixerResources<D> res_;
  LayerStateLayout lay_;
  GemmWeight<D> wqkv_, wzb_;
  const float* conv_ = nullptr;  // null: no short convolution
  const float* norm_ = nullptr;
  OutProjection<D> out_;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_RUNTIME_MIXERS_DELTA_NET_MIXER_H_
