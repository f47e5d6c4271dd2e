#include "engine/runtime/device_state_pool.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/util/status_macros.h"

namespace flatstate {

template <Device D>
DeviceStatePool<D>::DeviceStatePool(size_t state_floats) : state_floats_(state_floats) {
  if (state_floats_ > 0) {
    // Pages of about 64 MiB (1 to 256 slots): few allocations, little memory held unused.
    const size_t per_page = (size_t{64} << 20) / (sizeof(float) * state_floats_);
    slots_per_page_ = static_cast<int32_t>(std::clamp<size_t>(per_page, 1, 256));
    page_bytes_ = sizeof(float) * state_floats_ * slots_per_page_;
  }
}

template <Device D>
absl::Status DeviceStatePool<D>::Acquire(SessionState* s) {
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
    if (!free_.empty()) {
      id = free_.back();
      free_.pop_back();
    } else {
      if (slots_made_ % slots_per_page_ == 0) {
        Buffer<D> page;
        if (absl::Status st = page.Reserve(page_bytes_); !st.ok()) {
          return absl::ResourceExhaustedError(absl::StrCat(
              "no device memory for more linear session states (", slots_made_, " slots of ",
              sizeof(float) * state_floats_, " bytes held): ", st.message()));
        }
        pages_.push_back(std::move(page));
      }
      id = slots_made_++;
    }
    if (absl::Status st =
            CopyToDevice<D>(SlotPtr(id), s->linear.data(), sizeof(float) * state_floats_);
        !st.ok()) {
      free_.push_back(id);
      return st;
    }
    s->device.id = id;
    return absl::OkStatus();
  }
}

template <Device D>
absl::Status DeviceStatePool<D>::Read(const SessionState& s, float* host) const {
  if constexpr (!kHostMemory<D>) {
    if (s.device.id >= 0 && s.device.id < slots_made_) {
      RETURN_IF_ERROR(CopyToHost<D>(host, SlotPtr(s.device.id), sizeof(float) * state_floats_));
      return Synchronize<D>();
    }
  }
  return absl::OkStatus();
}

template <Device D>
void DeviceStatePool<D>::Release(SessionState* s) {
  if (s->device.id >= 0 && s->device.id < slots_made_) free_.push_back(s->device.id);
  s->device = DeviceSlot();
}

template <Device D>
float* DeviceStatePool<D>::StateOf(SessionState* s) const {
  if constexpr (kHostMemory<D>) {
    return s->linear.data();
  } else {
    return SlotPtr(s->device.id);
  }
}

template class DeviceStatePool<Device::kCpu>;
#ifdef FLATSTATE_HAVE_CUDA
template class DeviceStatePool<Device::kCuda>;
#endif

}  // namespace flatstate
