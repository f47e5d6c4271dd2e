// The CPU bodies' task loop over a LinearBatch (header-only, no state): one task per
// (sequence, head), decode sequences first, each with per-thread scratch.
#ifndef FLATSTATE_KERNELS_CPU_SEQUENCE_HEADS_H_
#define FLATSTATE_KERNELS_CPU_SEQUENCE_HEADS_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/linear_attention.h"
#include "kernels/parallel.h"

namespace flatstate::cpu {

// For every (sequence, head h < H) of `b` (a LinearBatch or a batch with the same decode /
// prefill / layer_offset fields), on `par`: fn(seq, h, base, scratch) with base the sequence's
// state slice of this layer and scratch at least need(seq) floats of this thread's. A stepwise
// sequence (LinearSeq::stepwise) is handed to fn one token at a time, in order, each as the
// one-token sequence a decode step would pass: the recurrent form's bits for every token; its
// `steps` is then that token's record (LinearSeq::steps; null for the last token or without
// records), which fn fills with RecordStep.
template <typename Batch, typename Need, typename Fn>
void ForEachSequenceHead(const Batch& b, int H, const Parallel& par, Need need, Fn fn) {
  const int64_t tasks = static_cast<int64_t>(b.num_decode + b.num_prefill) * H;
  par.For(tasks, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scratch;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t s = task / H;
      const LinearSeq& sq = s < b.num_decode ? b.decode[s] : b.prefill[s - b.num_decode];
      if (sq.stepwise) {
        LinearSeq one = sq;
        one.T = 1;
        one.stepwise = false;
        const size_t n = need(one);
        if (scratch.size() < n) scratch.resize(n);
        for (int64_t t = 0; t < sq.T; ++t) {
          one.row = sq.row + t;
          one.pos0 = sq.pos0 + t;
          one.steps = sq.steps != nullptr && t + 1 < sq.T ? sq.steps + t * sq.steps_stride : nullptr;
          fn(one, static_cast<int>(task % H), sq.state + b.layer_offset, scratch.data());
        }
        continue;
      }
      const size_t n = need(sq);
      if (scratch.size() < n) scratch.resize(n);
      fn(sq, static_cast<int>(task % H), sq.state + b.layer_offset, scratch.data());
    }
  });
}

// Copies n floats of one's state at p (inside one.state) to the same offset of one.steps, the
// record of a stepwise token (LinearSeq::steps); nothing when there is no record.
inline void RecordStep(const LinearSeq& one, const float* p, int64_t n) {
  if (one.steps == nullptr) return;
  std::memcpy(one.steps + (p - one.state), p, sizeof(float) * static_cast<size_t>(n));
}

template <typename Need, typename Fn>
void ForEachSequenceHead(const LinearBatch& b, const Parallel& par, Need need, Fn fn) {
  ForEachSequenceHead(b, b.H, par, need, fn);
}

}  // namespace flatstate::cpu

#endif  // FLATSTATE_KERNELS_CPU_SEQUENCE_HEADS_H_
