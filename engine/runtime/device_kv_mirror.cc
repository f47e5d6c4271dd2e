#include "engine/runtime/device_kv_mirror.h"

#include "engine/util/status_macros.h"

namespace flatstate {

template <Device D>
absl::Status DeviceKvMirror<D>::Init(KvBlockPool* kv) {
  kv_ = kv;
  if (kv == nullptr) return absl::OkStatus();
  void* base = kv->data();
  if constexpr (!kHostMemory<D>) {
    RETURN_IF_ERROR(mirror_.Reserve(kv->bytes_total()));
    base = mirror_.template as<float>();
  }
  view_ = kv->view();
  view_.base = base;
  return absl::OkStatus();
}

template <Device D>
absl::Status DeviceKvMirror<D>::Copy(std::span<const int32_t> blocks, bool to_host) {
  if constexpr (kHostMemory<D>) {
    return absl::OkStatus();  // the ops use the host pool in place
  } else {
    if (kv_ == nullptr) return absl::OkStatus();
    const size_t bpb = kv_->bytes_per_block();
    for (int32_t b : blocks) {
      if (b < 0 || b >= kv_->blocks_total()) continue;
      char* host = static_cast<char*>(kv_->data()) + b * bpb;
      char* dev = mirror_.template as<char>() + b * bpb;
      RETURN_IF_ERROR(to_host ? CopyToHost<D>(host, dev, bpb) : CopyToDevice<D>(dev, host, bpb));
    }
    return Synchronize<D>();
  }
}

template class DeviceKvMirror<Device::kCpu>;
#ifdef FLATSTATE_HAVE_CUDA
template class DeviceKvMirror<Device::kCuda>;
#endif

}  // namespace flatstate
