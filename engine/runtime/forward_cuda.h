// The CUDA twin of ForwardPass: the same batched step, run on the GPU. ForwardPass owns one when
// created for Device::kCuda and delegates Run to it after its own validation.
//
// Design (docs/gpu.md):
//   - Weights are uploaded once at Create from the Model's mmap'd host weights into one device
//     allocation (cudaMalloc; never managed memory) and stay there.
//   - Linear kinds: SessionState::linear stays the source of truth on the host. Each Run copies
//     the batch's states into a device staging area, runs every layer there (fused recurrent
//     decode kernel for 1-token runs, chunked prefill kernel otherwise) and copies them back. This
//     costs 2 x state bytes of PCIe traffic per session per step, but checkpoints, restores and
//     CPU/CUDA interchange need nothing special.
//   - Softmax: the KV cache lives in a device pool with exactly the host KvBlockPool's geometry;
//     the host pool keeps the accounting (block ids, Reserve/Release) and its memory is only used
//     to stage checkpoints (SyncKvToHost before serialising, SyncKvToDevice after restoring).
//   - GEMMs through cuBLAS in FP32 (no TF32); everything runs on cuda::Stream(); one
//     synchronisation at the end of Run, where any CUDA error becomes the returned status.
//
// Not thread-safe (the engine loop owns it). In builds without the CUDA backend, Create returns
// FailedPrecondition and nothing else is callable.
#ifndef FLATSTATE_ENGINE_RUNTIME_FORWARD_CUDA_H_
#define FLATSTATE_ENGINE_RUNTIME_FORWARD_CUDA_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/kv/kv_block_pool.h"
#include "engine/model/model.h"
#include "engine/runtime/forward.h"
#include "kernels/linear_attention.h"

namespace flatstate {

class ForwardCuda {
 public:
  // `heads` are ForwardPass's per-(layer, head) descriptors (host favor_proj pointers; copied and
  // re-pointed at the device weights). `kv` (softmax) gives the device pool's geometry and must
  // outlive this object. Fails with the CUDA error (ResourceExhausted when out of GPU memory), or
  // InvalidArgument when a shape exceeds the kernels' shared-memory limits.
  static absl::StatusOr<std::unique_ptr<ForwardCuda>> Create(const Model* model, KvBlockPool* kv,
                                                             int chunk_size,
                                                             const std::vector<LinearHead>& heads);
  ~ForwardCuda();

  // `batch` is already validated by ForwardPass::Run; row_start[s] is session s's first row.
  // Positions are NOT advanced (ForwardPass does that). On error no session is changed (linear
  // states are copied back only on success).
  absl::Status Run(std::span<const SequenceRun> batch, const std::vector<int64_t>& row_start,
                   std::vector<float>* logits);

  // Copy the given KV blocks device -> host pool (before a checkpoint) or host -> device (after a
  // restore). Softmax only.
  absl::Status SyncKvToHost(std::span<const int32_t> blocks);
  absl::Status SyncKvToDevice(std::span<const int32_t> blocks);

  struct Impl;

 private:
  ForwardCuda() = default;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_RUNTIME_FORWARD_CUDA_H_
