// One batched forward step of one model over many sessions: the GEMMs run over the rows of every
// session together; attention runs per (session, head) (CPU: on the thread pool).
//
// A session's rows never mix with another's, and every kernel is row-invariant, so a session's
// logits are bit-identical whatever else shares its step (batch invariance). Linear kinds use the
// recurrent form for a 1-token run and for a stepwise run (token by token: a speculative
// verification), and the chunked form (chunks aligned to absolute multiples of the chunk size)
// otherwise; softmax writes K/V into the paged pool and attends over it.
//
// ForwardPass validates; the layer loop itself is DeviceForward<D> (engine/runtime/
// device_forward.h), written once for every Device (CUDA: weights on the GPU, fixed-size states
// resident in a device slot pool, softmax KV in a device pool mirroring `kv`).
//
// Owns its weights' device copies and workspace; not thread-safe (the engine loop owns it). Create
// fails when the device is not usable or a shape exceeds its kernels' limits (InvalidArgument). Run
// fails with InvalidArgument for a token id out of range or an empty run, OutOfRange past
// max_position_embeddings (softmax), Unimplemented for a stepwise run off the CPU,
// FailedPrecondition when a softmax session has not reserved
// KV blocks for its new tokens, and with the device's error (ResourceExhausted when out of
// memory).
#ifndef FLATSTATE_ENGINE_RUNTIME_FORWARD_H_
#define FLATSTATE_ENGINE_RUNTIME_FORWARD_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kv/kv_block_pool.h"
#include "engine/model/model.h"
#include "engine/session/session_state.h"
#include "kernels/device.h"
#include "kernels/gemm.h"
#include "kernels/linear_attention.h"
#include "kernels/memory.h"
#include "kernels/parallel.h"

namespace flatstate {

struct SequenceRun {
  SessionState* state = nullptr;
  std::span<const int32_t> tokens;  // run through the model at state->position onwards
  bool all_logits = false;          // logits for every token (tests) or only the last
  // Several tokens through the recurrent form one at a time (each token's floats are those of a
  // one-token run at its position) rather than the chunked form: how a speculative step verifies
  // drafted tokens with a decode step's bits (engine.h). Softmax layers and every GEMM are
  // row-invariant, so only the recurrent ops change form. Only where supports_stepwise().
  bool stepwise = false;
  // Stepwise runs of models with a recurrent state only, or null: room for tokens.size() - 1
  // states (ModelConfig::state_floats() floats each), where the run leaves the state after each
  // of its tokens but the last (LinearSeq::steps), so a speculative step that keeps fewer tokens
  // than it ran copies one back instead of running them again.
  float* steps = nullptr;
};

// The interface the engine runs steps through; DeviceForward<D> (device_forward.h) implements it
// once for every Device. Run validates and advances positions here; the device body runs the
// layer loop.
class ForwardPass {
 public:
  virtual ~ForwardPass() = default;

  // `kv` is required for models with softmax layers and ignored otherwise; `par` must outlive
  // this object. `gemm`: the GEMM weights' type and (CUDA) kernel (kernels/gemm.h; see
  // device_forward.h for which weights take the type; every device has every type). `head_dtype`:
  // the output head's type (EngineOptions::head_dtype); unset, device_forward.h's rule.
  static absl::StatusOr<std::unique_ptr<ForwardPass>> Create(
      const Model* model, Device device, KvBlockPool* kv, const Parallel* par, int chunk_size,
      const GemmWeightOptions& gemm = {}, std::optional<WeightDtype> head_dtype = std::nullopt);

  // Runs every sequence's tokens, advances state->position and the recurrent state / KV cache.
  // `logits` receives, in batch order, vocab floats per returned row. On error nothing is changed.
  absl::Status Run(std::span<const SequenceRun> batch, std::vector<float>* logits);

  int chunk_size() const { return chunk_size_; }
  // Whether SequenceRun::stepwise runs here (the CPU); elsewhere Run refuses it (Unimplemented).
  virtual bool supports_stepwise() const = 0;

  // Softmax layers off the host: copy a session's KV blocks device -> host pool before it is
  // checkpointed, and host -> device after it is restored. No-ops (OK) on the CPU.
  virtual absl::Status SyncKvToHost(std::span<const int32_t> blocks) = 0;
  virtual absl::Status SyncKvToDevice(std::span<const int32_t> blocks) = 0;
  // Fixed-size state off the host (DeviceStatePool<D>): gives `s` a slot and uploads its state
  // if it has none (ResourceExhausted when device memory runs out; FailedPrecondition for a copy
  // whose state stayed on the device, see DeviceSlot); copies `s`'s slot into `host`; frees it.
  // No-ops on the CPU.
  virtual absl::Status AcquireState(SessionState* s) = 0;
  virtual absl::Status ReadState(const SessionState& s, float* host) = 0;
  virtual void ReleaseState(SessionState* s) = 0;
  // Device memory held for fixed-size states (slot pages), in bytes; 0 on the host.
  virtual size_t state_pool_bytes() const = 0;
  // The device's memory (QueryDeviceMemory<D>, kernels/memory.h): {0, 0} on the host.
  virtual absl::StatusOr<DeviceMemoryInfo> device_memory() const = 0;

 protected:
  ForwardPass(const Model* model, KvBlockPool* kv, int chunk_size);
  // `batch` is validated; row_start[s] is sequence s's first row and row_start.back() the number
  // of rows. Positions are not advanced (Run does that).
  virtual absl::Status RunValidated(std::span<const SequenceRun> batch,
                                    const std::vector<int64_t>& row_start,
                                    std::vector<float>* logits) = 0;

 private:
  const ModelConfig* cfg_ = nullptr;
  KvBlockPool* kv_ = nullptr;
  int chunk_size_ = 64;
  size_t state_floats_ = 0;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_RUNTIME_FORWARD_H_
