// DeviceStatePool<D>: where the sessions' fixed-size (recurrent) states live while D's kernels
// run over them. On the host (kCpu) the ops read and write SessionState::linear in place and the
// pool holds nothing. Off the host (kCuda) states live in device slots: pages of about 64 MiB
// (1 to 256 slots each, allocated on demand, never moved, so a slot's address is stable; freed
// slots are reused). A session's first step (or Acquire) takes a slot and uploads its state
// once; from then on the kernels update the slot in place; Read copies it back (checkpoint, move,
// eviction) and Release frees it.
//
// Owns the slot pages; not thread-safe (the engine loop owns it through DeviceForward<D>).
// Acquire fails with ResourceExhausted when device memory runs out and FailedPrecondition for a
// state that does not match the model or a copy whose newest state stayed on the device; Read
// returns the device's copy error. A failed Acquire leaves the session without a slot.
#ifndef FLATSTATE_ENGINE_RUNTIME_DEVICE_STATE_POOL_H_
#define FLATSTATE_ENGINE_RUNTIME_DEVICE_STATE_POOL_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "engine/session/session_state.h"
#include "kernels/device.h"
#include "kernels/memory.h"

namespace flatstate {

template <Device D>
class DeviceStatePool {
 public:
  // `state_floats`: floats of state per session (ModelConfig::state_floats(); 0: none).
  explicit DeviceStatePool(size_t state_floats);

  // Gives `s` a slot and uploads s->linear if it has none. OK and nothing done on the host.
  absl::Status Acquire(SessionState* s);
  // Copies `s`'s slot into `host` (state_floats floats) and waits; nothing when `s` has no slot.
  absl::Status Read(const SessionState& s, float* host) const;
  // Frees `s`'s slot, if any (s->device becomes empty).
  void Release(SessionState* s);
  // Where D's ops find `s`'s state: its slot off the host, s->linear on it. `s` must have been
  // acquired.
  float* StateOf(SessionState* s) const;
  // Device memory held in slot pages, in bytes (0 on the host).
  size_t bytes() const { return pages_.size() * page_bytes_; }

 private:
  float* SlotPtr(int32_t id) const {
    return pages_[id / slots_per_page_].template as<float>() +
           static_cast<size_t>(id % slots_per_page_) * state_floats_;
  }

  size_t state_floats_ = 0;
  int32_t slots_per_page_ = 1;
  size_t page_bytes_ = 0;
  int32_t slots_made_ = 0;
  std::vector<Buffer<D>> pages_;
  std::vector<int32_t> free_;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_RUNTIME_DEVICE_STATE_POOL_H_
