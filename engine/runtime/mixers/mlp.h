// Mlp<D>: the channel mixer of the transformer families: w1 (+ bias), GELU (flatstate's kinds)
// or SwiGLU (Llama, Qwen: w1 holds gate|up, fused at load), w2 (+ bias) accumulated into the
// residual. MlpKind::kNone (Mamba-2): absent (present() false; the layer loop skips it).
//
// Owns handles to weights held by the DeviceWeights<D> it was bound with; thread-compatible.
// Bind fails with the device's allocation / copy errors; Forward enqueues kernels and cannot
// fail (device errors surface at the loop's next Synchronize).
#ifndef FLATSTATE_ENGINE_RUNTIME_MIXERS_MLP_H_
#define FLATSTATE_ENGINE_RUNTIME_MIXERS_MLP_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"
#include "engine/runtime/device_weights.h"
#include "kernels/device.h"
#include "kernels/gemm.h"
#include "kernels/parallel.h"

namespace flatstate {

template <Device D>
class Mlp {
 public:
  absl::Status Bind(const ModelConfig& c, const LayerWeights& lw, DeviceWeights<D>* weights);
  bool present() const { return present_; }
  // Floats of scratch Forward needs for `rows` rows.
  int64_t ScratchFloats(int64_t rows) const {
    return rows * width_ + (swiglu_ ? rows * intermediate_ : 0);
  }
  // residual [rows, hidden] += mlp(in [rows, hidden]).
  void Forward(const float* in, int64_t rows, float* scratch, const Parallel& par,
               float* residual) const;

 private:
  bool present_ = false;
  bool swiglu_ = false;
  int64_t hidden_ = 0, intermediate_ = 0;
  int64_t width_ = 0;  // floats per row of w1's output (SwiGLU: gate|up, 2 intermediate)
  GemmWeight<D> w1_, w2_;
  const float* b1_ = nullptr;  // biases (null: none)
  const float* b2_ = nullptr;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_RUNTIME_MIXERS_MLP_H_
