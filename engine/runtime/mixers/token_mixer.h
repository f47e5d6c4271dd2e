// The per-layer parts of the layer loop (DeviceForward<D>, engine/runtime/device_forward.h):
// a token mixer (what mixes information across positions: softmax attention over the paged KV
// cache, flatstate's linear / gated / window attention, and the next families' recurrences) and
// the channel mixer (Mlp<D>, mlp.h). The loop is
//   x = embed(tokens); per layer: x += mixer(RmsNorm(x)); x += mlp(RmsNorm(x)) (when the model
// has one); logits = head(x)
// and knows nothing of what a mixer does inside. An architecture picks a mixer per layer
// (MakeTokenMixer below, from ModelConfig::layer_attention); adding one is a new class here,
// its ops in kernels/, and a case in MakeTokenMixer.
//
// A mixer owns its weights' device copies (through the DeviceWeights<D> it was bound with, which
// must outlive it) and reads the step's descriptors (DeviceStep<D>) and scratch at Forward.
// Mixers are not thread-safe (the engine loop owns them), except that Forward runs on several
// threads at once for different sessions' rows on the CPU (a split step, device_forward.h): it
// must not write the mixer's own members, only the step's scratch, carry, residual and the
// sessions' state / KV rows. Creation fails with the device's
// allocation / copy errors; Forward enqueues kernels and reports nothing (device errors surface
// at the loop's next Synchronize / TakeError).
#ifndef FLATSTATE_ENGINE_RUNTIME_MIXERS_TOKEN_MIXER_H_
#define FLATSTATE_ENGINE_RUNTIME_MIXERS_TOKEN_MIXER_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"
#include "engine/runtime/device_step.h"
#include "engine/runtime/device_weights.h"
#include "engine/session/session_state.h"
#include "kernels/device.h"
#include "kernels/paged_attention.h"
#include "kernels/parallel.h"

namespace flatstate {

// fn(r0, r1) over ranges that cover rows [0, rows) once: on the CPU spread over `par` (each part
// of the pool takes one range), elsewhere one call fn(0, rows) (a device's ops are asynchronous
// on its one stream). For row-wise ops, which compute each row alone: results do not depend on
// the split. At batch 32 the CPU forward pass spent about a sixth of the calling thread's time in
// such ops (norms, activations, RWKV-7's token shift, keys and output) while the pool's other
// threads waited (docs/benchmarks.md).
template <Device D, typename Fn>
void ForRows(const Parallel& par, int64_t rows, const Fn& fn) {
  if constexpr (D == Device::kCpu) {
    if (rows > 1 && par.num_threads() > 1) {
      par.For(rows, fn);
      return;
    }
  }
  fn(0, rows);
}

// An element-wise op's work in multiply-adds per element, for PoolFor (an exp or a division
// costs several): elements * kElementWork.
inline constexpr int64_t kElementWork = 8;

// What every mixer of a model shares, built once by DeviceForward<D>.
template <Device D>
struct MixerResources {
  const ModelConfig* config = nullptr;
  const StateLayout* layout = nullptr;  // the per-layer offsets into a session's state
  const PagedKv* kv = nullptr;          // softmax layers' pool as D's ops address it
  RopeTable rope;                       // softmax layers' RoPE (inv_freq in D's memory)
  AttentionShape shape;                 // softmax layers' heads
  int chunk = 64;                       // the chunked form's chunk size
};

// One step, as a mixer sees it.
template <Device D>
struct MixerStep {
  const DeviceStep<D>* step = nullptr;
  float* scratch = nullptr;  // at least ScratchFloats(step->rows) floats
  // Rows a layer hands to the layers after it within one step (RWKV-7's v_first), at least
  // CarryFloats(step->rows) floats; kept across the step's layers, meaningless between steps.
  float* carry = nullptr;
  const Parallel* pool = nullptr;
  const Parallel* serial = nullptr;  // the calling thread
  // The pool for `work` multiply-adds, or the calling thread when that is too little to pay for
  // waking the pool (a batch-1 decode step). Results do not depend on the choice.
  const Parallel& PoolFor(int64_t work) const { return work < kMinParallelWork ? *serial : *pool; }
  // ForRows over PoolFor(work): a row-wise op of `work` multiply-adds in all.
  template <typename Fn>
  void ForRows(int64_t rows, int64_t work, const Fn& fn) const {
    flatstate::ForRows<D>(PoolFor(work), rows, fn);
  }
  // A recurrent op's batch (LinearBatch, GroupedHeadBatch and its kinds): the step's decode and
  // prefill sequences, the layer's slice of their states (`lay`) and the chunked form's chunk.
  template <typename Batch>
  void SetSequences(const LayerStateLayout& lay, int chunk, Batch* b) const {
    b->layer_offset = static_cast<int64_t>(lay.begin);
    b->s_off = static_cast<int64_t>(lay.s);
    b->chunk = chunk;
    b->decode = step->decode.on;
    b->num_decode = static_cast<int>(step->decode.host.size());
    b->prefill = step->prefill.on;
    b->num_prefill = static_cast<int>(step->prefill.host.size());
  }
  static constexpr int64_t kMinParallelWork = 1 << 17;
};

template <Device D>
class TokenMixer {
 public:
  virtual ~TokenMixer() = default;
  // Floats of scratch Forward needs for `rows` rows.
  virtual int64_t ScratchFloats(int64_t rows) const = 0;
  // Floats of the step's carry it reads or writes for `rows` rows (MixerStep::carry).
  virtual int64_t CarryFloats(int64_t /*rows*/) const { return 0; }
  // `in`: the step's normed rows [rows, hidden]; adds the mixer's output to `residual`
  // [rows, hidden] and updates the sessions' state / KV rows of this layer.
  virtual void Forward(const float* in, float* residual, const MixerStep<D>& step) = 0;
};

// The mixer of `layer` (its weights `lw`) for the model in `res`.
template <Device D>
absl::StatusOr<std::unique_ptr<TokenMixer<D>>> MakeTokenMixer(int layer, const LayerWeights& lw,
                                                              const MixerResources<D>& res,
                                                              DeviceWeights<D>* weights);

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_RUNTIME_MIXERS_TOKEN_MIXER_H_
