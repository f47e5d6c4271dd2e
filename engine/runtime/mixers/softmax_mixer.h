// SoftmaxMixer<D>: causal softmax attention over the paged KV cache, for the softmax layers of
// every family (flatstate's softmax kind and `layer_types` softmax layers; Llama, Qwen2, Qwen3):
// the q|k|v projection (with bias and per-head q/k RMSNorm where the model has them), RoPE over
// rotary_dim with the model's scaled frequencies and the write of the rotated k and v rows into
// the session's blocks (RopeAndWriteKv), grouped-query PagedAttention, the output gate where the
// model has one (ModelConfig::attn_output_gate: attention * sigmoid(gate)), and the output
// projection. It keeps no fixed-size state; its KV rows are layer kv_layer_index(layer) of the
// pool.
//
// Owns handles to weights held by the DeviceWeights<D> it was created with; not thread-safe.
// See token_mixer.h for how creation and Forward fail.
#ifndef FLATSTATE_ENGINE_RUNTIME_MIXERS_SOFTMAX_MIXER_H_
#define FLATSTATE_ENGINE_RUNTIME_MIXERS_SOFTMAX_MIXER_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "engine/runtime/mixers/projections.h"
#include "engine/runtime/mixers/token_mixer.h"

namespace flatstate {

template <Device D>
class SoftmaxMixer final : public TokenMixer<D> {
 public:
  static absl::StatusOr<std::unique_ptr<SoftmaxMixer>> Create(int layer, const LayerWeights& lw,
                                                              const MixerResources<D>& res,
                                                              DeviceWeights<D>* weights);
  int64_t ScratchFloats(int64_t rows) const override;
  void Forward(const float* in, float* residual, const MixerStep<D>& step) override;

 private:
  explicit SoftmaxMixer(const MixerResources<D>& res) : res_(res) {}

  MixerResources<D> res_;
  int kv_layer_ = 0;
  QkvProjection<D> qkv_;
  OutProjection<D> out_;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_RUNTIME_MIXERS_SOFTMAX_MIXER_H_
