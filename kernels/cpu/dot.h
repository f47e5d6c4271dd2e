// Dot product for the CPU kernel bodies (header-only, no state).
//
// Eight running partial sums combined in a fixed tree: the order depends only on n, never on the
// batch or the thread, so kernels that use it stay batch-invariant; and the compiler vectorises
// the lane loop, which it may not do for a single serial sum (that would reorder the additions).
#ifndef FLATSTATE_KERNELS_CPU_DOT_H_
#define FLATSTATE_KERNELS_CPU_DOT_H_

#include <cstdint>

namespace flatstate::cpu {

inline float Dot(const float* a, const float* b, int64_t n) {
  float l[8] = {};
  int64_t d = 0;
  for (; d + 8 <= n; d += 8) {
    for (int j = 0; j < 8; ++j) l[j] += a[d + j] * b[d + j];
  }
  float s = ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
  for (; d < n; ++d) s += a[d] * b[d];
  return s;
}

}  // namespace flatstate::cpu

#endif  // FLATSTATE_KERNELS_CPU_DOT_H_
