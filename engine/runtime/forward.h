// One batched forward step of one model over many sessions: the GEMMs run over the rows of every
// session together; attention runs per (session, head) (CPU: on the thread pool).
//
// A session's rows never mix with another's, and every kernel is row-invariant, so a session's
// logits are bit-identical whatever else shares its step (batch invariance). Linear kinds use the
// recurrent form for a 1-token run and the chunked form (chunks aligned to absolute multiples of
// the chunk size) otherwise; softmax writes K/V into the paged pool and attends over it.
//
// ForwardPass validates; the layer loop itself is DeviceForward<D> (engine/runtime/
// forward_device.h), written once for every Device (CUDA: weights on the GPU, linear states
// resident in a device slot pool, softmax KV in a device pool mirroring `kv`).
//
// Owns its step runner; not thread-safe (the engine loop owns it). Create fails when the device
// is not usable or a shape exceeds its kernels' limits (InvalidArgument). Run fails with
// InvalidArgument for a token id out of range or an empty run, OutOfRange past
// max_position_embeddings (softmax), FailedPrecondition when a softmax session has not reserved
// KV blocks for its new tokens, and with the device's error (ResourceExhausted when out of
// memory).
#ifndef FLATSTATE_ENGINE_RUNTIME_FORWARD_H_
#define FLATSTATE_ENGINE_RUNTIME_FORWARD_H_

#include <cstdint>
#include <memory>
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
};

class StepRunner;  // engine/runtime/forward_device.h

class ForwardPass {
 public:
  ~ForwardPass();

  // `kv` is required for softmax models and ignored otherwise; `par` must outlive this object.
  // `gemm`: the GEMM weights' type and (CUDA) kernel (kernels/gemm.h; see forward_device.h for
  // which weights take the type; every device has every type).
  static absl::StatusOr<std::unique_ptr<ForwardPass>> Create(const Model* model, Device device,
                                                             KvBlockPool* kv, const Parallel* par,
                                                             int chunk_size,
                                                             const GemmWeightOptions& gemm = {});

  // Runs every sequence's tokens, advances state->position and the recurrent state / KV cache.
  // `logits` receives, in batch order, vocab floats per returned row. On error nothing is changed.
  absl::Status Run(std::span<const SequenceRun> batch, std::vector<float>* logits);

  int chunk_size() const { return chunk_size_; }

  // Softmax on CUDA: copy a session's KV blocks device -> host pool before it is checkpointed,
  // and host -> device after it is restored. No-ops (OK) on the CPU and for linear kinds.
  absl::Status SyncKvToHost(std::span<const int32_t> blocks);
  absl::Status SyncKvToDevice(std::span<const int32_t> blocks);
  // Linear kinds on CUDA: the session's device slot (StepRunner in forward_device.h). No-ops on
  // the CPU and for softmax.
  absl::Status AcquireState(SessionState* s);
  absl::Status ReadState(const SessionState& s, float* host);
  void ReleaseState(SessionState* s);
  size_t state_pool_bytes() const;
  absl::StatusOr<DeviceMemoryInfo> device_memory() const;

 private:
  ForwardPass() = default;

  const ModelConfig* cfg_ = nullptr;
  KvBlockPool* kv_ = nullptr;
  int chunk_size_ = 64;
  size_t state_floats_ = 0;
  std::unique_ptr<StepRunner> runner_;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_RUNTIME_FORWARD_H_
