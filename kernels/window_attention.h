// Sliding-window softmax attention (Longformer's causal local attention; docs/kinds.md
// "window"): the token at position p attends to positions max(0, p-W+1) .. p. A session keeps
// only a ring of the last W RoPE-rotated keys and values per layer: position p's key and value
// in slot p mod W of ring_k / ring_v ([W][H*hd] each). So its memory is constant.
//
// WindowAttention first rotates the rows' q and k in place (rotate-half RoPE at their absolute
// positions, as softmax's RopeAndWriteKv), then, per query, attends over the ring's entries
// older than the call (read before anything is written) followed by the call's own keys, in
// ascending position, and finally writes the call's last min(T, W) keys and values into their
// slots. A query's floats depend only on the keys of its band, never on how a prompt was split
// into calls or what else shares the step: decode and any prefill split give identical bits.
//
// All pointers, descriptor arrays included, are in the op's device memory. kCpu body
// (cpu/window_attention.cc): one task per (sequence, head) on `par`. kCuda body
// (cuda/window_attention.cu): one block per (sequence, head), asynchronous on cuda::Stream().
#ifndef FLATSTATE_KERNELS_WINDOW_ATTENTION_H_
#define FLATSTATE_KERNELS_WINDOW_ATTENTION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/device.h"
#include "kernels/parallel.h"

namespace flatstate {

// One sequence of a batched call: rows [row, row + T) at positions pos0 .. pos0 + T - 1.
struct WindowSeq {
  int64_t row = 0;
  int64_t T = 0;
  int64_t pos0 = 0;
  float* state = nullptr;  // the session's state; this layer's rings at + ring_k / + ring_v
  // Null, or (a speculative step's stepwise sequence, CPU only) where the state after each token
  // t < T - 1 goes, laid out as `state` (LinearSeq::steps): the rings after token t.
  float* steps = nullptr;
  int64_t steps_stride = 0;
};

struct WindowBatch {
  const WindowSeq* seqs = nullptr;
  int num = 0;
  int H = 0, head_dim = 0;
  int window = 0;  // W
  float rope_theta = 10000.f;
  // Row r, head h: q at q + r*in_stride + h*hd (same for k, v; q and k are rotated in place);
  // output at out + r*out_stride + h*hd.
  float* q = nullptr;
  float* k = nullptr;
  const float* v = nullptr;
  int64_t in_stride = 0;
  float* out = nullptr;
  int64_t out_stride = 0;
  int64_t ring_k = 0, ring_v = 0;  // floats from WindowSeq::state to this layer's rings
};

// OK when D's kernels take head_dim and W (kCuda: the shared memory they need fits 48 KiB);
// InvalidArgument naming the limit otherwise.
template <Device D>
absl::Status CheckWindowAttentionShape(int head_dim, int window);

template <Device D>
void WindowAttention(const WindowBatch& b, const Parallel& par);

}  // namespace flatstate

#endif  // FLATSTATE_KERNELS_WINDOW_ATTENTION_H_
