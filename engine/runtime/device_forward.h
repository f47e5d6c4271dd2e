// The batched forward step of one model, written once for every Device: DeviceForward<D> runs
// the layer loop
//   x = embed(tokens); per layer: x += mixer(RmsNorm(x)); x += mlp(RmsNorm(x)) (a model with an
//   MLP); logits = head(RmsNorm(x)) over the returned rows
// against the ops of kernels/ (each `template <Device D>`), so CPU and CUDA differ only in op
// bodies and in where buffers live. What a layer's token mixer does is its TokenMixer<D>'s
// business (engine/runtime/mixers/: softmax attention over the paged KV cache, flatstate's linear
// / gated / window attention, Gated DeltaNet, Mamba-2, RWKV-7), chosen per layer by
// MakeTokenMixer; the channel mixer is Mlp<D>. RmsNorm is LayerNorm (with biases) where the
// model says (ModelConfig::norm_kind).
//
// Weights are prepared for D once at Create (DeviceWeights<D>: GEMM weights as
// GemmWeightOptions::dtype asks, the output head as EngineOptions::head_dtype asks or, unset, as
// f32 (vocab x hidden: the logits stay closest to the f32 model's) except when the layers run
// narrower than f32 (bf16, int8, int4, bf16dot) and the head's values are all exactly bf16 (a BF16
// file's head: the same logits from half the bytes; bf16dot layers take it as bf16dot, the others
// as bf16), other tensors as f32, in place where D's memory is
// host memory, else copied to the device). Sessions' memory: fixed-size states in a
// DeviceStatePool<D> (in place on the host; device slots otherwise), softmax K/V in a
// DeviceKvMirror<D> of the engine's KvBlockPool. A step's descriptors are a DeviceStep<D>; the
// mixers' and MLP's scratch is one buffer, sized by the largest ScratchFloats.
//
// Threads (CPU): each op of the loop runs on the pool (`par`), except that a step with enough
// rows for every thread (batch_split.h: SplitSequences) is divided into runs of whole sequences,
// one per thread, each running the layers on its thread with its own descriptors and buffers,
// then the final norm and the head run over every returned row on the pool: the same bits
// (every op is row-invariant), two hand-offs instead of one per op. Mixers
// and the MLP therefore must not write their own members in Forward. FLATSTATE_SPLIT_STEPS=0 in
// the environment (read at creation) turns the split off, for comparison (docs/benchmarks.md).
//
// Owns its weights' device copies, mixers, state pool, KV mirror and workspace; not thread-safe
// (the engine loop owns it). Failures are statuses: shape limits of D's kernels (InvalidArgument)
// at Create, memory (ResourceExhausted) and device errors at Create or Run. A Run that fails
// before its first kernel (validation, allocation, staging) changes no session. A device fault
// during the kernels (CUDA reports it asynchronously and it poisons the context) is returned,
// and the batch's device-resident states are then undefined: such sessions resume from their
// last checkpoint.
#ifndef FLATSTATE_ENGINE_RUNTIME_DEVICE_FORWARD_H_
#define FLATSTATE_ENGINE_RUNTIME_DEVICE_FORWARD_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/kv/kv_block_pool.h"
#include "engine/model/model.h"
#include "engine/runtime/device_kv_mirror.h"
#include "engine/runtime/device_state_pool.h"
#include "engine/runtime/device_step.h"
#include "engine/runtime/device_weights.h"
#include "engine/runtime/forward.h"
#include "engine/runtime/mixers/mlp.h"
#include "engine/runtime/mixers/token_mixer.h"
#include "engine/session/session_state.h"
#include "kernels/device.h"
#include "kernels/gemm.h"
#include "kernels/memory.h"
#include "kernels/parallel.h"

namespace flatstate {

// DeviceForward<d> for a runtime device: FailedPrecondition / Unavailable when `d` is not
// compiled in or not usable (CheckDevice). `kv` (null without softmax layers) and `par` must
// outlive the result.
absl::StatusOr<std::unique_ptr<ForwardPass>> CreateDeviceForward(
    Device d, const Model* model, KvBlockPool* kv, const Parallel* par, int chunk_size,
    const GemmWeightOptions& gemm, std::optional<WeightDtype> head_dtype);

template <Device D>
class DeviceForward final : public ForwardPass {
 public:
  static absl::StatusOr<std::unique_ptr<DeviceForward>> Create(
      const Model* model, KvBlockPool* kv, const Parallel* par, int chunk_size,
      const GemmWeightOptions& gemm, std::optional<WeightDtype> head_dtype);

  absl::Status SyncKvToHost(std::span<const int32_t> blocks) override {
    return kv_.SyncToHost(blocks);
  }
  absl::Status SyncKvToDevice(std::span<const int32_t> blocks) override {
    return kv_.SyncToDevice(blocks);
  }
  absl::Status AcquireState(SessionState* s) override { return states_.Acquire(s); }
  absl::Status ReadState(const SessionState& s, float* host) override {
    return states_.Read(s, host);
  }
  void ReleaseState(SessionState* s) override { states_.Release(s); }
  size_t state_pool_bytes() const override { return states_.bytes(); }
  absl::StatusOr<DeviceMemoryInfo> device_memory() const override { return QueryDeviceMemory<D>(); }
  bool supports_stepwise() const override { return D == Device::kCpu; }

 private:
  struct Layer {
    const float* attn_norm = nullptr;
    const float* mlp_norm = nullptr;
    const float* attn_norm_bias = nullptr;  // LayerNorm models
    const float* mlp_norm_bias = nullptr;
    std::unique_ptr<TokenMixer<D>> mixer;
    Mlp<D> mlp;
  };

  DeviceForward(const Model* model, KvBlockPool* kv, const Parallel* par, int chunk_size,
                const GemmWeightOptions& gemm);
  absl::Status Bind(KvBlockPool* kv);
  absl::Status RunValidated(std::span<const SequenceRun> batch,
                            const std::vector<int64_t>& row_start,
                            std::vector<float>* logits) override;
  // One share of a step: its descriptors and buffers, grown as needed.
  struct Workspace {
    DeviceStep<D> step;
    Buffer<D> x, h, scratch, carry;
  };
  absl::Status RunLayers(std::span<const SequenceRun> batch, const std::vector<int64_t>& row_start,
                         std::vector<float>* logits);
  // Builds `ws` for `batch` (row_start as DeviceStep::Build takes it) and sizes its buffers.
  absl::Status Prepare(std::span<const SequenceRun> batch, const std::vector<int64_t>& row_start,
                       Workspace* ws);
  // The layer loop over a prepared workspace, its ops on `par`; the returned rows' final hidden
  // states (before the final norm) to `last`.
  void Layers(Workspace* ws, const Parallel& par, float* last);
  // y = the model's norm of `rows` rows of x (RMSNorm, or LayerNorm with `bias`), over row ranges
  // (MixerStep::ForRows).
  void Norm(const float* x, const float* weight, const float* bias, int64_t rows, float* y,
            const MixerStep<D>& step) const;

  const Model* model_ = nullptr;
  const ModelConfig* cfg_ = nullptr;
  const Parallel* par_ = nullptr;
  SerialParallel serial_;
  StateLayout layout_;
  DeviceWeights<D> weights_;
  DeviceStatePool<D> states_;
  DeviceKvMirror<D> kv_;
  std::vector<double> rope_inv_host_;  // ModelConfig::RopeInvFreq (the mixers' RoPE table)
  MixerResources<D> res_;
  const float* embed_ = nullptr;
  const float* norm_ = nullptr;
  const float* norm_bias_ = nullptr;
  std::optional<WeightDtype> head_dtype_;  // EngineOptions::head_dtype (unset: the rule above)
  GemmWeight<D> lm_head_;
  std::vector<uint16_t> head_bits_;  // during Create only: a bf16 head's bits
  std::vector<Layer> layers_;
  // ws_[0] runs a whole step; a CPU step split among the pool's threads (batch_split.h) takes
  // one per share.
  std::vector<Workspace> ws_;
  bool split_steps_ = true;  // FLATSTATE_SPLIT_STEPS is not "0"
  Buffer<D> last_;           // every share's returned rows, for the final norm and the head
  Buffer<D> logits_;         // the head's output where D's memory is not host memory
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_RUNTIME_DEVICE_FORWARD_H_
