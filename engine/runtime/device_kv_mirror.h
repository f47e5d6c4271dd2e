// DeviceKvMirror<D>: the softmax layers' K/V rows where D's kernels read them. On the host
// (kCpu) that is the engine's KvBlockPool itself and the mirror holds nothing. Off the host
// (kCuda) it is a device pool with exactly the host pool's geometry and block ids: the host pool
// keeps the accounting (which blocks a session owns), and a session's blocks are copied across
// only when it is checkpointed (SyncToHost) or restored (SyncToDevice).
//
// Owns the device pool; borrows `kv`, which must outlive it. Not thread-safe (the engine loop
// owns it through DeviceForward<D>). Create fails with the device's allocation error; the syncs
// with its copy errors. Block ids outside the pool are skipped.
#ifndef FLATSTATE_ENGINE_RUNTIME_DEVICE_KV_MIRROR_H_
#define FLATSTATE_ENGINE_RUNTIME_DEVICE_KV_MIRROR_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "engine/kv/kv_block_pool.h"
#include "kernels/device.h"
#include "kernels/memory.h"
#include "kernels/paged_attention.h"

namespace flatstate {

template <Device D>
class DeviceKvMirror {
 public:
  DeviceKvMirror() = default;  // no softmax layers: view() is empty, the syncs do nothing

  // Mirrors `kv` (null: none).
  absl::Status Init(KvBlockPool* kv);
  // The pool as D's paged-attention ops address it.
  const PagedKv& view() const { return view_; }
  absl::Status SyncToHost(std::span<const int32_t> blocks) { return Copy(blocks, true); }
  absl::Status SyncToDevice(std::span<const int32_t> blocks) { return Copy(blocks, false); }

 private:
  absl::Status Copy(std::span<const int32_t> blocks, bool to_host);

  KvBlockPool* kv_ = nullptr;
  Buffer<D> mirror_;  // off the host only
  PagedKv view_;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_RUNTIME_DEVICE_KV_MIRROR_H_
