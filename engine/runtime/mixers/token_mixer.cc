#include "engine/runtime/mixers/token_mixer.h"

#include "engine/runtime/mixers/delta_net_mixer.h"
#include "engine/runtime/mixers/flatstate_linear_mixer.h"
#include "engine/runtime/mixers/gated_deltanet_mixer.h"
#include "engine/runtime/mixers/gla_mixer.h"
#include "engine/runtime/mixers/mamba2_mixer.h"
#include "engine/runtime/mixers/rwkv7_mixer.h"
#include "engine/runtime/mixers/softmax_mixer.h"

namespace flatstate {

template <Device D>
absl::StatusOr<std::unique_ptr<TokenMixer<D>>> MakeTokenMixer(int layer, const LayerWeights& lw,
                                                              const MixerResources<D>& res,
                                                              DeviceWeights<D>* weights) {
  const LayerAttention a = res.config->layer_attention(layer);
  if (a.softmax) return SoftmaxMixer<D>::Create(layer, lw, res, weights);
  if (a.delta && !res.config->delta.decay) {
    return DeltaNetMixer<D>::Create(layer, lw, res, weights);
  }
  if (a.delta) return GatedDeltaNetMixer<D>::Create(layer, lw, res, weights);
  if (a.ssm) return Mamba2Mixer<D>::Create(layer, lw, res, weights);
  if (a.rwkv7) return Rwkv7Mixer<D>::Create(layer, lw, res, weights);
  if (a.gla) return GlaMixer<D>::Create(layer, lw, res, weights);
  return FlatstateLinearMixer<D>::Create(layer, lw, res, weights);
}

template absl::StatusOr<std::unique_ptr<TokenMixer<Device::kCpu>>> MakeTokenMixer(
    int, const LayerWeights&, const MixerResources<Device::kCpu>&, DeviceWeights<Device::kCpu>*);
#ifdef FLATSTATE_HAVE_CUDA
template absl::StatusOr<std::unique_ptr<TokenMixer<Device::kCuda>>> MakeTokenMixer(
    int, const LayerWeights&, const MixerResources<Device::kCuda>&, DeviceWeights<Device::kCuda>*);
#endif

}  // namespace flatstate
