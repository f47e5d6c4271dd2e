// DeviceStep<D>: the descriptors of one batched step, built on the host and staged where D's
// kernels read them (the host arrays themselves where D's memory is host memory, else copies in
// device buffers). The layer loop and the mixers (engine/runtime/mixers/) read them; nothing
// here runs a kernel.
//
// Built per step by Build from the batch: the token ids and returned rows; for models with
// softmax layers each row's (position, block table) for the paged pool; for models with
// fixed-size state each sequence's state pointer (its DeviceStatePool<D> slot off the host), the
// decode sequences (one token) and prefill sequences (several, with their scratch offsets in the
// linear-attention workspace), the conv and window descriptors, and the prefill rows' (sequence,
// t) map.
//
// Owns its host arrays and device copies (members, so that host data outlives asynchronous
// copies); not thread-safe (the engine loop owns it through DeviceForward<D>). Build fails with
// the state pool's Acquire errors and the device's allocation / copy errors; a session whose
// Acquire succeeded keeps its slot.
#ifndef FLATSTATE_ENGINE_RUNTIME_DEVICE_STEP_H_
#define FLATSTATE_ENGINE_RUNTIME_DEVICE_STEP_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/model/config.h"
#include "engine/runtime/device_state_pool.h"
#include "engine/runtime/forward.h"
#include "kernels/device.h"
#include "kernels/elementwise.h"
#include "kernels/linear_attention.h"
#include "kernels/memory.h"
#include "kernels/paged_attention.h"
#include "kernels/window_attention.h"

namespace flatstate {

template <Device D>
class DeviceStep {
 public:
  // One of the step's descriptor arrays: built in `host`, read by D's ops at `on`.
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

  // `batch` is validated; row_start[s] is sequence s's first row, row_start.back() the rows.
  // `chunk`: the chunked form's chunk size (prefill scratch).
  absl::Status Build(const ModelConfig& c, int chunk, std::span<const SequenceRun> batch,
                     const std::vector<int64_t>& row_start, DeviceStatePool<D>* states);

  int64_t rows = 0;
  Staged<int32_t> tokens, out_rows;  // token per row; the rows whose logits are returned
  // Softmax layers: the sessions' block tables, concatenated, and per row its position.
  Staged<int32_t> tables;
  Staged<PagedRow> paged;
  // Fixed-size state: per sequence, by form.
  Staged<LinearSeq> decode, prefill;
  Staged<ConvSeq> conv;
  Staged<WindowSeq> window;
  Staged<int32_t> row_seq;  // prefill rows: index into prefill
  Staged<int64_t> row_t;    // prefill rows: t within the sequence
  Buffer<D> workspace;      // the chunked form's scratch (off the host only)
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_RUNTIME_DEVICE_STEP_H_
