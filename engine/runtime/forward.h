// One batched forward step of one model over many sessions: the GEMMs run over the rows of every
// session together; attention runs per (session, head) on the thread pool.
//
// A session's rows never mix with another's, and every kernel is row-invariant, so a session's
// logits are bit-identical whatever else shares its step (batch invariance). Linear kinds use the
// recurrent form for a 1-token run and the chunked form (chunks aligned to absolute multiples of
// the chunk size) otherwise; softmax writes K/V into the paged pool and attends over it.
//
// Device::kCuda: Create builds a ForwardCuda twin (engine/runtime/forward_cuda.h: weights on the
// GPU, linear states copied in/out per step, softmax KV in a device pool mirroring `kv`) and Run
// delegates to it after the same validation.
//
// Owns its workspace; not thread-safe (the engine loop owns it). Fails with InvalidArgument for a
// token id out of range or an empty run, OutOfRange past max_position_embeddings (softmax), and
// FailedPrecondition when a softmax session has not reserved KV blocks for its new tokens.
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
#include "kernels/parallel.h"

namespace flatstate {

struct SequenceRun {
  SessionState* state = nullptr;
  std::span<const int32_t> tokens;  // run through the model at state->position onwards
  bool all_logits = false;          // logits for every token (tests) or only the last
};

class ForwardCuda;

class ForwardPass {
 public:
  ~ForwardPass();

  // `kv` is required for softmax models and ignored otherwise; `par` must outlive this object.
  static absl::StatusOr<std::unique_ptr<ForwardPass>> Create(const Model* model, Device device,
                                                             KvBlockPool* kv,
                                                             const Parallel* par, int chunk_size);

  // Runs every sequence's tokens, advances state->position and the recurrent state / KV cache.
  // `logits` receives, in batch order, vocab floats per returned row. On error nothing is changed.
  absl::Status Run(std::span<const SequenceRun> batch, std::vector<float>* logits);

  int chunk_size() const { return chunk_size_; }

  // Softmax on CUDA: copy a session's KV blocks device -> host pool before it is checkpointed,
  // and host -> device after it is restored. No-ops (OK) on the CPU and for linear kinds.
  absl::Status SyncKvToHost(std::span<const int32_t> blocks);
  absl::Status SyncKvToDevice(std::span<const int32_t> blocks);

 private:
  ForwardPass() = default;
  // The pool for `work` multiply-adds of attention, or the calling thread when that is too little
  // to pay for waking the pool (a batch-1 decode step). Results do not depend on the choice.
  const Parallel& PoolFor(int64_t work) const {
    return work < kMinParallelWork ? static_cast<const Parallel&>(serial_) : *par_;
  }
  static constexpr int64_t kMinParallelWork = 1 << 17;
  void Attention(int layer, std::span<const SequenceRun> batch,
                 const std::vector<int64_t>& row_start);

  const Model* model_ = nullptr;
  const ModelConfig* cfg_ = nullptr;
  Device device_ = Device::kCpu;
  KvBlockPool* kv_ = nullptr;
  const Parallel* par_ = nullptr;
  SerialParallel serial_;
  int chunk_size_ = 64;
  std::vector<LinearHead> heads_;  // [layer * H + h]
  std::unique_ptr<ForwardCuda> cuda_;  // set for Device::kCuda
  // CPU: the projection weights packed once for GemmPacked (kernels/gemm.h).
  struct PackedLayer {
    PackedWeight wqkv, wo, w1, w2;
  };
  std::vector<PackedLayer> packed_;
  PackedWeight packed_lm_head_;
  LinearStateLayout layout_;
  // Workspace, grown as needed.
  std::vector<float> x_, h_, h2_, qkv_, att_, mlp_, last_;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_RUNTIME_FORWARD_H_
