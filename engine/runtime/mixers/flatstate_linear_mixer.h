// FlatstateLinearMixer<D>: the recurrent layers of flatstate's own kinds (linear_elu, cosformer,
// cosine, favor, gated, window, hybrid): the optional causal conv token shift, one GEMM for
// q|k|v (gated: q|k|v and the H gate logits, the gate rows fused into wqkv at bind time), then
// the layer's branches (ModelConfig::layer_attention): a linear branch, LinearAttention with the
// kind's feature map (GatedAttention for gated) in the recurrent form for 1-token runs and the
// chunked form otherwise; a window branch, WindowAttention over a ring of the last window_size
// rotated keys and values (after the linear branch, which must see q and k unrotated; both: the
// outputs are summed); then the output projection. The per-head descriptors (LinearHead: feature
// map, cosine exponent, RFA scale, gate bias, feature projection) are built here from the
// layer's weights and live in D's memory.
//
// Owns its head descriptors' device copy and handles to weights held by the DeviceWeights<D> it
// was created with; not thread-safe. See token_mixer.h for how creation and Forward fail.
#ifndef FLATSTATE_ENGINE_RUNTIME_MIXERS_FLATSTATE_LINEAR_MIXER_H_
#define FLATSTATE_ENGINE_RUNTIME_MIXERS_FLATSTATE_LINEAR_MIXER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/runtime/mixers/projections.h"
#include "engine/runtime/mixers/token_mixer.h"
#include "kernels/linear_attention.h"

namespace flatstate {

template <Device D>
class FlatstateLinearMixer final : public TokenMixer<D> {
 public:
  static absl::StatusOr<std::unique_ptr<FlatstateLinearMixer>> Create(int layer,
                                                                      const LayerWeights& lw,
                                                                      const MixerResources<D>& res,
                                                                      DeviceWeights<D>* weights);
  int64_t ScratchFloats(int64_t rows) const override;
  void Forward(const float* in, float* residual, const MixerStep<D>& step) override;

 private:
  explicit FlatstateLinearMixer(const MixerResources<D>& res) : res_(res) {}
  absl::Status BindQkv(const LayerWeights& lw, DeviceWeights<D>* weights);
  absl::Status BindHeads(const LayerWeights& lw, DeviceWeights<D>* weights);
  void Linear(const float* qkv, float* att, const MixerStep<D>& step) const;
  void Window(float* qkv, float* out, const MixerStep<D>& step) const;

  MixerResources<D> res_;
  LayerAttention branches_;
  LayerStateLayout lay_;
  QkvProjection<D> qkv_;
  OutProjection<D> out_;
  std::vector<LinearHead> heads_host_;  // [H], feature_proj in D's memory
  Buffer<D> heads_buf_;
  const LinearHead* heads_ = nullptr;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_RUNTIME_MIXERS_FLATSTATE_LINEAR_MIXER_H_
