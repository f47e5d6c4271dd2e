// The batched forward step of one model, written once for every Device: DeviceForward<D> runs
// the layer loop against the ops of kernels/ (each `template <Device D>`), so CPU and CUDA differ
// only in op bodies and in where buffers live. ForwardPass (forward.h) validates a batch and
// calls it through the StepRunner interface.
//
// Weights are bound at Create by name, field by field from the Model's LayerWeights /
// ModelWeights, and prepared for D once: the layers' GEMM weights (wqkv, wo, w1, w2) through
// PrepareGemmWeight<D> (an F32 file), PrepareGemmWeightBf16<D> (a BF16 file) or
// PrepareGemmWeightQuantized<D> (an int8 / int4 file: its quants and scales as they are) as
// GemmWeightOptions::dtype (CPU: packed panels, quantised for bf16/int8/int4; CUDA: device
// copies, bf16 kept as bf16, int8/int4 dequantised to fp32), the gated kind's gate rows fused
// into wqkv's and prepared with it, the output head as f32 always (256 x hidden: a negligible share
// of the bytes, and the logits stay closest to the f32 model's), other tensors (embeddings, norms,
// conv, decay, feature projections) as f32, used in place where D's memory is host memory, else
// copied to the device.
//
// State. Where D's memory is host memory (kCpu) the ops read and write the sessions' linear
// state and the engine's KvBlockPool in place. Otherwise (kCuda): linear states live in a device
// slot pool (pages of slots, grown on demand, freed slots reused): a session's first step (or
// AcquireState) takes a slot and uploads SessionState::linear once; from then on the ops update
// the slot in place and nothing crosses PCIe per step but tokens, descriptors and logits;
// ReadState copies a slot to the host (checkpoint, move, eviction) and ReleaseState frees it.
// Softmax K/V live in a device pool with exactly the host pool's geometry and block ids (the host
// pool keeps the accounting and stages checkpoints through SyncKvToHost / SyncKvToDevice).
//
// One step: gather embeddings; per layer RMSNorm, causal conv (ModelConfig::has_conv), GEMM
// q|k|v (gated: q|k|v|gate logits, the gate rows appended to wqkv at bind time; + bias where the
// model has one), attention by the layer's branches (ModelConfig::layer_attention): linear branch
// LinearAttention (GatedAttention for gated) over the step's decode and prefill sequences, window
// branch WindowAttention (after the linear branch, which must see q and k unrotated; both: the
// outputs are summed), softmax RopeAndWriteKv then PagedAttention (grouped-query heads, RoPE with
// the model's scaled frequencies over rotary_dim); GEMM wo (+= residual, + bias), RMSNorm, GEMM
// w1 (+ bias), GELU or SwiGLU (ModelConfig::mlp_kind), GEMM w2 (+= residual, + bias); final
// RMSNorm and the output head (the embedding matrix when tied) over the returned rows.
//
// Owns its weights' device copies and its workspace; not thread-safe (the engine loop owns it).
// Failures are statuses: shape limits of D's kernels (InvalidArgument) at Create, memory
// (ResourceExhausted) and device errors at Create or Run. A Run that fails before its first
// kernel (validation, allocation, staging) changes no session. A device fault during the kernels
// (CUDA reports it asynchronously and it poisons the context) is returned, and the batch's
// device-resident states are then undefined: such sessions resume from their last checkpoint.
#ifndef FLATSTATE_ENGINE_RUNTIME_FORWARD_DEVICE_H_
#define FLATSTATE_ENGINE_RUNTIME_FORWARD_DEVICE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/kv/kv_block_pool.h"
#include "engine/model/model.h"
#include "engine/runtime/forward.h"
#include "engine/session/session_state.h"
#include "kernels/device.h"
#include "kernels/elementwise.h"
#include "kernels/gated_attention.h"
#include "kernels/gemm.h"
#include "kernels/linear_attention.h"
#include "kernels/memory.h"
#include "kernels/paged_attention.h"
#include "kernels/parallel.h"
#include "kernels/window_attention.h"

namespace flatstate {

// What ForwardPass calls. `batch` is validated; row_start[s] is sequence s's first row and
// row_start.back() the number of rows. Positions are not advanced (ForwardPass does that).
class StepRunner {
 public:
  virtual ~StepRunner() = default;
  virtual absl::Status Run(std::span<const SequenceRun> batch,
                           const std::vector<int64_t>& row_start, std::vector<float>* logits) = 0;
  virtual absl::Status SyncKvToHost(std::span<const int32_t> blocks) = 0;
  virtual absl::Status SyncKvToDevice(std::span<const int32_t> blocks) = 0;
  // Linear kinds off the host: gives `s` a slot and uploads its `linear` if it has none
  // (ResourceExhausted when device memory runs out; FailedPrecondition for a copy whose state
  // stayed on the device, see DeviceSlot). OK and nothing done elsewhere.
  virtual absl::Status AcquireState(SessionState* s) = 0;
  // Copies `s`'s slot into `host` (the state's floats) and waits; nothing where `s` has no slot.
  virtual absl::Status ReadState(const SessionState& s, float* host) = 0;
  // Frees `s`'s slot, if any (s->device becomes empty).
  virtual void ReleaseState(SessionState* s) = 0;
  // Device memory held for linear states (slot pages), in bytes; 0 on the host.
  virtual size_t state_pool_bytes() const = 0;
  // The device's memory (QueryDeviceMemory<D>, kernels/memory.h): {0, 0} on the host.
  virtual absl::StatusOr<DeviceMemoryInfo> device_memory() const = 0;
};

// DeviceForward<d> for a runtime device: FailedPrecondition / Unavailable when `d` is not
// compiled in or not usable (CheckDevice). `heads` are the per-(layer, head) descriptors with
// host feature_proj pointers; `kv` (softmax) and `par` must outlive the result.
// `gemm`: how the GEMM weights are prepared (kernels/gemm.h; the output head ignores its dtype).
absl::StatusOr<std::unique_ptr<StepRunner>> CreateStepRunner(Device d, const Model* model,
                                                             KvBlockPool* kv, const Parallel* par,
                                                             int chunk_size,
                                                             std::span<const LinearHead> heads,
                                                             const GemmWeightOptions& gemm);

template <Device D>
class DeviceForward final : public StepRunner {
 public:
  static absl::StatusOr<std::unique_ptr<DeviceForward>> Create(const Model* model, KvBlockPool* kv,
                                                               const Parallel* par, int chunk_size,
                                                               std::span<const LinearHead> heads,
                                                               const GemmWeightOptions& gemm);

  absl::Status Run(std::span<const SequenceRun> batch, const std::vector<int64_t>& row_start,
                   std::vector<float>* logits) override;
  absl::Status SyncKvToHost(std::span<const int32_t> blocks) override;
  absl::Status SyncKvToDevice(std::span<const int32_t> blocks) override;
  absl::Status AcquireState(SessionState* s) override;
  absl::Status ReadState(const SessionState& s, float* host) override;
  void ReleaseState(SessionState* s) override;
  size_t state_pool_bytes() const override { return slot_pages_.size() * page_bytes_; }
  absl::StatusOr<DeviceMemoryInfo> device_memory() const override { return QueryDeviceMemory<D>(); }

 private:
  struct Layer {
    const float* attn_norm = nullptr;
    const float* conv = nullptr;  // null: no token shift
    const float* mlp_norm = nullptr;
    GemmWeight<D> wqkv, wo, w1, w2;
    const float* bqkv = nullptr;  // biases (null: none)
    const float* bo = nullptr;
    const float* b1 = nullptr;
    const float* b2 = nullptr;
    const float* q_norm = nullptr;  // per-head RMSNorm weights (null: none)
    const float* k_norm = nullptr;
  };

  DeviceForward() = default;
  absl::Status BindWeights(std::span<const LinearHead> heads);
  // `count` elements of host tensor `host` where D's ops can read it (null stays null).
  template <typename T>
  absl::StatusOr<const T*> Place(const T* host, int64_t count);
  // Builds and stages the step's descriptors (and, off the host, the linear states).
  absl::Status Stage(std::span<const SequenceRun> batch, const std::vector<int64_t>& row_start);
  absl::Status RunLayers(std::span<const SequenceRun> batch,
                         const std::vector<int64_t>& row_start, std::vector<float>* logits);
  void Attention(int layer, int64_t rows);
  absl::Status CopyKv(std::span<const int32_t> blocks, bool to_host);
  // The pool for `work` multiply-adds of attention, or the calling thread when that is too little
  // to pay for waking the pool (a batch-1 decode step). Results do not depend on the choice.
  const Parallel& PoolFor(int64_t work) const {
    return work < kMinParallelWork ? static_cast<const Parallel&>(serial_) : *par_;
  }
  static constexpr int64_t kMinParallelWork = 1 << 17;

  const Model* model_ = nullptr;
  const ModelConfig* cfg_ = nullptr;
  KvBlockPool* kv_ = nullptr;
  const Parallel* par_ = nullptr;
  SerialParallel serial_;
  int chunk_ = 64;
  GemmWeightOptions gemm_;  // how the GEMM weights are prepared
  StateLayout layout_;
  int64_t qkv_width_ = 0;  // floats per row of the q|k|v(|gate) GEMM's output
  int64_t mlp_width_ = 0;  // floats per row of w1's output (SwiGLU: gate|up, 2 intermediate)
  AttentionShape shape_;   // softmax layers' heads
  RopeTable rope_;         // softmax layers' RoPE (inv_freq placed on D)

  // Weights, bound by name.
  std::vector<Buffer<D>> placed_;  // device copies made by Place (none where memory is host)
  std::vector<double> rope_inv_host_;  // ModelConfig::RopeInvFreq (rope_.inv_freq's source)
  const float* embed_ = nullptr;
  const float* norm_ = nullptr;
  GemmWeight<D> lm_head_;
  std::vector<Layer> layers_;
  std::vector<LinearHead> heads_host_;  // [layer * H + h], feature_proj in D's memory
  Buffer<D> heads_buf_;
  const LinearHead* heads_ = nullptr;
  Buffer<D> kv_mirror_;  // softmax off the host: the device K/V pool
  PagedKv pool_;

  // One of a step's descriptor arrays: built in `host`, read by D's ops at `on` (the host data
  // itself where D's memory is host memory, else a copy in `dev`). Members, so that the host
  // data outlives asynchronous copies.
  template <typename T>
  struct Staged {
    std::vector<T> host;
    Buffer<D> dev;
    T* on = nullptr;
    absl::Status Stage() {
      absl::StatusOr<T*> p = OnDevice<D>(&dev, host);
      if (!p.ok()) return p.status();
      on = *p;
      return absl::OkStatus();
    }
  };
  Staged<int32_t> tokens_, out_rows_, row_seq_, tables_;
  Staged<int64_t> row_t_;
  // Off the host: the linear state slot pool. Slot i is float offset (i % slots_per_page_) *
  // state_floats_ of page i / slots_per_page_; pages never move, so a slot's address is stable.
  float* SlotPtr(int32_t id) const {
    return slot_pages_[id / slots_per_page_].template as<float>() +
           static_cast<size_t>(id % slots_per_page_) * state_floats_;
  }
  size_t state_floats_ = 0;
  int32_t slots_per_page_ = 1;
  size_t page_bytes_ = 0;
  int32_t slots_made_ = 0;
  std::vector<Buffer<D>> slot_pages_;
  std::vector<int32_t> free_slots_;
  Staged<LinearSeq> decode_, prefill_;
  Staged<ConvSeq> conv_;
  Staged<WindowSeq> window_;
  Staged<PagedRow> paged_;
  // Workspace, grown as needed.
  Buffer<D> x_, h_, h2_, qkv_, att_, att2_, mlp_, mlp2_, last_, logits_, workspace_;
  std::vector<float> host_logits_;  // off the host: logits copied back
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_RUNTIME_FORWARD_DEVICE_H_
