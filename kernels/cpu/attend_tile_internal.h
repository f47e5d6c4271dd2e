// What the bodies of kernels/cpu/attend_tile.h share: the pool row lookup, bf16 widening, the
// per-task running state (m, l, acc in the caller's scratch) and the final division. Internal to
// attend_tile*.cc; no state of its own.
#ifndef FLATSTATE_KERNELS_CPU_ATTEND_TILE_INTERNAL_H_
#define FLATSTATE_KERNELS_CPU_ATTEND_TILE_INTERNAL_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

#include "kernels/bf16.h"
#include "kernels/cpu/attend_tile.h"

namespace flatstate::cpu::attend_internal {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int kLanes = 16;
static_assert(kKeyTile == kLanes, "a key group is one vector of 16 lanes");

// The halving tree of the header over 16 values (destroys them).
inline float HalvingSum(float* x) {
  for (int w = kLanes / 2; w >= 1; w /= 2) {
    for (int i = 0; i < w; ++i) x[i] += x[i + w];
  }
  return x[0];
}

// The key (which = 0) or value (which = 1) row of position `pos`: a pointer into the pool.
template <typename T>
inline const T* PoolRow(const PagedKv& kv, const int32_t* table, int layer, int which,
                        int64_t pos) {
  const int32_t block = table[pos / kv.block_size];
  const int slot = static_cast<int>(pos % kv.block_size);
  return static_cast<const T*>(kv.base) +
         PagedKv::RowOffset(block, layer, which, slot, kv.block_size, kv.num_layers, kv.hidden);
}

// The key and value rows (from the K/V head of the task's first head on) of key group [t0, t0 +
// 16), len of them in the context; lanes past the context point at key t0 (the bodies mask them
// out).
template <typename T>
inline void GroupRows(const AttendTask& t, int64_t t0, int len, const T** krow, const T** vrow) {
  const int64_t off = static_cast<int64_t>(t.h0 / t.group) * t.hd;
  if (t.kv->block_size % kLanes == 0) {  // the group lies in one block: consecutive rows
    const T* k0 = PoolRow<T>(*t.kv, t.table, t.layer, 0, t0) + off;
    const T* v0 = PoolRow<T>(*t.kv, t.table, t.layer, 1, t0) + off;
    for (int j = 0; j < kLanes; ++j) {
      krow[j] = k0 + (j < len ? j : 0) * static_cast<int64_t>(t.kv->hidden);
      vrow[j] = v0 + (j < len ? j : 0) * static_cast<int64_t>(t.kv->hidden);
    }
    return;
  }
  for (int j = 0; j < kLanes; ++j) {
    const int64_t pos = t0 + (j < len ? j : 0);
    krow[j] = PoolRow<T>(*t.kv, t.table, t.layer, 0, pos) + off;
    vrow[j] = PoolRow<T>(*t.kv, t.table, t.layer, 1, pos) + off;
  }
}

inline float Widen(float x) { return x; }
inline float Widen(uint16_t x) { return FloatFromBf16(x); }

// The running max m, sum l and weighted V sums of every (row, head) of a task, in the scratch:
// index (row * nh + head).
struct TaskState {
  int nh = 0;
  int64_t ctx_max = 0;
  float* m = nullptr;
  float* l = nullptr;
  float* acc = nullptr;  // [row][head][hd]
};

inline TaskState StartTask(const AttendTask& t, AttendScratch* s) {
  TaskState st;
  st.nh = t.h1 - t.h0;
  st.ctx_max = t.rows[t.n - 1].ctx;
  const size_t pairs = static_cast<size_t>(t.n) * st.nh, acc = pairs * t.hd;
  if (s->m.size() < pairs) s->m.resize(pairs), s->l.resize(pairs);
  if (s->acc.size() < acc) s->acc.resize(acc);
  std::fill(s->m.begin(), s->m.begin() + pairs, kNegInf);
  std::fill(s->l.begin(), s->l.begin() + pairs, 0.f);
  std::fill(s->acc.begin(), s->acc.begin() + acc, 0.f);
  st.m = s->m.data();
  st.l = s->l.data();
  st.acc = s->acc.data();
  return st;
}

inline void FinishTask(const AttendTask& t, const TaskState& st) {
  for (int i = 0; i < t.n; ++i) {
    float* o = t.out + t.rows[i].row * t.out_stride + static_cast<int64_t>(t.h0) * t.hd;
    for (int h = 0; h < st.nh; ++h) {
      const float li = st.l[i * st.nh + h];
      const float inv = li > 0.f ? 1.f / li : 0.f;  // ctx 0: nothing to attend to gives zeros
      const float* a = st.acc + (static_cast<int64_t>(i) * st.nh + h) * t.hd;
      for (int d = 0; d < t.hd; ++d) o[h * t.hd + d] = a[d] * inv;
    }
  }
}

// Calls body.template operator()<T, C>() for the task's K/V element type T (float, or uint16_t
// for bf16) and C = hd / 16 in 1..16 (the vector bodies need AttendSimdFits(hd)), so that each
// body is instantiated with its loops' trip counts as constants.
template <typename Body>
void DispatchTypeAndChunks(const AttendTask& t, Body&& body) {
  static_assert(kSimdMaxHeadDim == 16 * kLanes);
  auto by_chunks = [&]<typename T>() {
    return [&]<int... C>(std::integer_sequence<int, C...>) {
      // C + 1 for C in 0..15: exactly one matches t.hd / kLanes.
      static_cast<void>(
          ((t.hd / kLanes == C + 1 ? (body.template operator()<T, C + 1>(), true) : false) || ...));
    }
    (std::make_integer_sequence<int, 16>{});
  };
  if (t.kv->dtype == KvDtype::kBf16) {
    by_chunks.template operator()<uint16_t>();
  } else {
    by_chunks.template operator()<float>();
  }
}

}  // namespace flatstate::cpu::attend_internal

#endif  // FLATSTATE_KERNELS_CPU_ATTEND_TILE_INTERNAL_H_
