// DeviceForward's session-memory members (engine/runtime/forward_device.h): the K/V mirror's
// copies and the device slots of linear states. Split from forward_device.cc, which holds the
// weights and the layer loop; the members are instantiated here for each device.
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/runtime/forward_device.h"
#include "engine/util/status_macros.h"

namespace flatstate {

template <Device D>
absl::Status DeviceForward<D>::CopyKv(std::span<const int32_t> blocks, bool to_host) {
  if constexpr (kHostMemory<D>) {
    return absl::OkStatus();  // the ops use the host pool in place
  } else {
    if (kv_ == nullptr || !cfg_->has_kv()) return absl::OkStatus();
    const size_t bpb = kv_->bytes_per_block();
    for (int32_t b : blocks) {
      if (b < 0 || b >= kv_->blocks_total()) continue;
      char* host = static_cast<char*>(kv_->data()) + b * bpb;
      char* dev = kv_mirror_.template as<char>() + b * bpb;
      RETURN_IF_ERROR(to_host ? CopyToHost<D>(host, dev, bpb) : CopyToDevice<D>(dev, host, bpb));
    }
    return Synchronize<D>();
  }
}

template <Device D>
absl::Status DeviceForward<D>::SyncKvToHost(std::span<const int32_t> blocks) {
  return CopyKv(blocks, /*to_host=*/true);
}

template <Device D>
absl::Status DeviceForward<D>::SyncKvToDevice(std::span<const int32_t> blocks) {
  return CopyKv(blocks, /*to_host=*/false);
}

template <Device D>
absl::Status DeviceForward<D>::AcquireState(SessionState* s) {
  if constexpr (kHostMemory<D>) {
    return absl::OkStatus();  // the ops use SessionState::linear in place
  } else {
    if (state_floats_ == 0 || s->device.id >= 0) return absl::OkStatus();
    if (s->device.host_stale) {
      return absl::FailedPreconditionError(
          "session state is a copy made while its newest linear state was on the device "
          "(call Engine::SyncToHost before copying a session)");
    }
    if (s->linear.size() != state_floats_) {
      return absl::FailedPreconditionError("session state does not match the model");
    }
    int32_t id;
    if (!free_slots_.empty()) {
      id = free_slots_.back();
      free_slots_.pop_back();
    } else {
      if (slots_made_ % slots_per_page_ == 0) {
        Buffer<D> page;
        if (absl::Status st = page.Reserve(page_bytes_); !st.ok()) {
          return absl::ResourceExhaustedError(absl::StrCat(
              "no device memory for more linear session states (", slots_made_, " slots of ",
              sizeof(float) * state_floats_, " bytes held): ", st.message()));
        }
        slot_pages_.push_back(std::move(page));
      }
      id = slots_made_++;
    }
    if (absl::Status st = CopyToDevice<D>(SlotPtr(id), s->linear.data(),
                                          sizeof(float) * state_floats_);
        !st.ok()) {
      free_slots_.push_back(id);
      return st;
    }
    s->device.id = id;
    return absl::OkStatus();
  }
}

template <Device D>
absl::Status DeviceForward<D>::ReadState(const SessionState& s, float* host) {
  if constexpr (!kHostMemory<D>) {
    if (s.device.id >= 0 && s.device.id < slots_made_) {
      RETURN_IF_ERROR(CopyToHost<D>(host, SlotPtr(s.device.id), sizeof(float) * state_floats_));
      return Synchronize<D>();
    }
  }
  return absl::OkStatus();
}

template <Device D>
void DeviceForward<D>::ReleaseState(SessionState* s) {
  if (s->device.id >= 0 && s->device.id < slots_made_) free_slots_.push_back(s->device.id);
  s->device = DeviceSlot();
}

#define FLATSTATE_INSTANTIATE_STATE_MEMBERS(D)                                           \
  template absl::Status DeviceForward<D>::CopyKv(std::span<const int32_t>, bool);        \
  template absl::Status DeviceForward<D>::SyncKvToHost(std::span<const int32_t>);        \
  template absl::Status DeviceForward<D>::SyncKvToDevice(std::span<const int32_t>);      \
  template absl::Status DeviceForward<D>::AcquireState(SessionState*);                   \
  template absl::Status DeviceForward<D>::ReadState(const SessionState&, float*);        \
  template void DeviceForward<D>::ReleaseState(SessionState*);

FLATSTATE_INSTANTIATE_STATE_MEMBERS(Device::kCpu)
#ifdef FLATSTATE_HAVE_CUDA
FLATSTATE_INSTANTIATE_STATE_MEMBERS(Device::kCuda)
#endif
#undef FLATSTATE_INSTANTIATE_STATE_MEMBERS

}  // namespace flatstate
