// Mlp<D>: the channel mixer of every family: w1 (+ bias), GELU (flatstate's kinds) or SwiGLU
// (Llama, Qwen: w1 holds gate|up, fused at load), w2 (+ bias) accumulated into the residual; or
// RWKV's channel mix, w2 relu(w1 xk)^2 with xk = x + (x_prev - x) mu (a two-tap causal conv whose
// previous row is the session's state at the layer's ffn_shift). MlpKind::kNone (Mamba-2): absent
// (present() false; the layer loop skips it).
//
// Owns handles to weights held by the DeviceWeights<D> it was bound with and RWKV's tap weights;
// thread-compatible. Bind fails with the device's allocation / copy errors; Forward enqueues
// kernels and cannot fail (device errors surface at the loop's next Synchronize).
#ifndef FLATSTATE_ENGINE_RUNTIME_MIXERS_MLP_H_
#define FLATSTATE_ENGINE_RUNTIME_MIXERS_MLP_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"
#include "engine/runtime/device_weights.h"
#include "engine/runtime/mixers/token_mixer.h"
#include "engine/session/session_state.h"
#include "kernels/device.h"
#include "kernels/gemm.h"
#include "kernels/parallel.h"

namespace flatstate {

template <Device D>
class Mlp {
 public:
  // `layer`: where the layer's state sits (RWKV's previous row).
  absl::Status Bind(const ModelConfig& c, const LayerWeights& lw, const LayerStateLayout& layer,
                    DeviceWeights<D>* weights);
  bool present() const { return present_; }
  // Floats of scratch Forward needs for `rows` rows.
  int64_t ScratchFloats(int64_t rows) const {
    return rows * width_ + (swiglu_ ? rows * intermediate_ : 0) + (relu2_ ? rows * hidden_ : 0);
  }
  // residual [step rows, hidden] += mlp(in [step rows, hidden]); updates RWKV's previous row.
  void Forward(const float* in, const MixerStep<D>& step, float* residual) const;

 private:
  bool present_ = false;
  bool swiglu_ = false;
  bool relu2_ = false;
  const float* shift_ = nullptr;  // RWKV: the token shift's taps [hidden][2] (mu, 1 - mu)
  std::vector<float> shift_taps_;
  int64_t shift_offset_ = 0;  // the previous row's offset in a session's state
  int64_t hidden_ = 0, intermediate_ = 0;
  int64_t width_ = 0;  // floats per row of w1's output (SwiGLU: gate|up, 2 intermediate)
  GemmWeight<D> w1_, w2_;
  const float* b1_ = nullptr;  // biases (null: none)
  const float* b2_ = nullptr;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_RUNTIME_MIXERS_MLP_H_
