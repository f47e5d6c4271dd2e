// Rwkv7Mixer<D>: RWKV-7's time mix (fla's RWKV7Attention; engine/arch/rwkv7_arch.h,
// tools/flatstate_ref/rwkv7.py for every formula), on the layer's LayerNorm-ed rows x:
//   d = x_prev - x (a two-tap causal conv, x_prev from the session's state);
//   xr..xg = x + d * x_r..x_g;  r, k, v = xr Wr^T, xk Wk^T, xv Wv^T
//   logw = -exp(-0.5) sigmoid(tanh(xw W1^T) W2^T + b)        per channel
//   layer 0: v_first = v (the step's carry);  later layers: v += (v_first - v) sigmoid(lora_v(xv))
//   a = sigmoid(lora_a(xa));  g = sigmoid(xg G1^T) G2^T
//   kk = normalize(k k_k) per head;  k *= 1 + (a - 1) k_a
//   o = generalized delta rule (kernels/rwkv7.h: S <- diag(w) S - (kk a)(kk^T S) + k v^T,
//       o = S^T r), recurrent for every token
//   residual += ((GroupNorm_heads(o) + (r k r_k summed per head) v) g) Wo^T
// State per session and layer (StateLayout): S [heads][N][N] at s, x_prev [D] at conv (the
// channel mix's x_prev at ffn_shift belongs to Mlp<D>).
//
// Owns handles to weights held by the DeviceWeights<D> it was created with and the token-shift
// tap weights; not thread-safe. See token_mixer.h for how creation and Forward fail.
#ifndef FLATSTATE_ENGINE_RUNTIME_MIXERS_RWKV7_MIXER_H_
#define FLATSTATE_ENGINE_RUNTIME_MIXERS_RWKV7_MIXER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/runtime/mixers/projections.h"
#include "engine/runtime/mixers/token_mixer.h"

namespace flatstate {

template <Device D>
class Rwkv7Mixer final : public TokenMixer<D> {
 public:
  static absl::StatusOr<std::unique_ptr<Rwkv7Mixer>> Create(int layer, const LayerWeights& lw,
                                                            const MixerResources<D>& res,
                                                            DeviceWeights<D>* weights);
  int64_t ScratchFloats(int64_t rows) const override;
  int64_t CarryFloats(int64_t rows) const override;
  void Forward(const float* in, float* residual, const MixerStep<D>& step) override;

 private:
  explicit Rwkv7Mixer(const MixerResources<D>& res) : res_(res) {}
  // out [rows, D] = act(in W1^T) W2^T (+ bias); `tmp` holds rows x rank floats.
  void Lora(const float* in, int64_t rows, const GemmWeight<D>& w1, const GemmWeight<D>& w2,
            int64_t rank, bool tanh_inner, bool sigmoid_inner, const float* bias, float* tmp,
            float* out, const Parallel& par) const;

  MixerResources<D> res_;
  LayerStateLayout lay_;
  bool first_ = false;             // layer 0: sets v_first
  std::vector<float> shift_taps_;  // [D][2]: (1, -1), the conv that gives x_prev - x
  const float* shift_ = nullptr;
  const float* mix_ = nullptr;
  GemmWeight<D> wr_, wk_, wv_;
  GemmWeight<D> w1_, w2_, a1_, a2_, v1_, v2_, g1_, g2_;
  const float* w_bias_ = nullptr;
  const float* a_bias_ = nullptr;
  const float* v_bias_ = nullptr;
  const float* k_k_ = nullptr;
  const float* k_a_ = nullptr;
  const float* r_k_ = nullptr;
  const float* gn_w_ = nullptr;
  const float* gn_b_ = nullptr;
  OutProjection<D> out_;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_RUNTIME_MIXERS_RWKV7_MIXER_H_
