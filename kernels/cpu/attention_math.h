// Softmax and RoPE helpers shared by the CPU bodies of paged and window attention
// (header-only, no state). The order of every sum depends only on the lengths, never on the batch
// or the thread, so callers stay batch-invariant.
#ifndef FLATSTATE_KERNELS_CPU_ATTENTION_MATH_H_
#define FLATSTATE_KERNELS_CPU_ATTENTION_MATH_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace flatstate::cpu {

// sc[t] = exp(sc[t] - max) in place; returns 1 / sum, the sum taken in double over 4 lanes.
inline float ExpNormaliser(float* sc, int64_t ctx) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t t = 0; t < ctx; ++t) mx = std::max(mx, sc[t]);
  for (int64_t t = 0; t < ctx; ++t) sc[t] = std::exp(sc[t] - mx);
  double l[4] = {};
  int64_t t = 0;
  for (; t + 4 <= ctx; t += 4) {
    for (int j = 0; j < 4; ++j) l[j] += sc[t + j];
  }
  double sum = (l[0] + l[2]) + (l[1] + l[3]);
  for (; t < ctx; ++t) sum += sc[t];
  return static_cast<float>(1.0 / sum);
}

// RoPE's rotation at absolute position `pos` for the inverse frequencies inv[0, half): c[i], s[i]
// = cos, sin of pos * inv[i], in double.
inline void RopeAngles(int64_t pos, const double* inv, int half, float* c, float* s) {
  const double p = static_cast<double>(pos);
  for (int i = 0; i < half; ++i) {
    c[i] = static_cast<float>(std::cos(p * inv[i]));
    s[i] = static_cast<float>(std::sin(p * inv[i]));
  }
}

// RopeAngles for the unscaled frequencies theta^(-2i/head_dim), i < head_dim / 2.
inline void RopeAngles(int64_t pos, int head_dim, float theta, float* c, float* s) {
  const int half = head_dim / 2;
  const double p = static_cast<double>(pos);
  for (int i = 0; i < half; ++i) {
    const double inv = std::pow(static_cast<double>(theta), -2.0 * i / head_dim);
    c[i] = static_cast<float>(std::cos(p * inv));
    s[i] = static_cast<float>(std::sin(p * inv));
  }
}

// Rotate-half RoPE in place on `heads` consecutive heads of one row over the first rotary_dim
// elements of each head (pairs i, i + rotary_dim / 2), with RopeAngles' c and s.
inline void RopeRow(float* x, int heads, int head_dim, int rotary_dim, const float* c,
                    const float* s) {
  const int half = rotary_dim / 2;
  for (int h = 0; h < heads; ++h) {
    float* v = x + h * head_dim;
    for (int i = 0; i < half; ++i) {
      const float x1 = v[i], x2 = v[i + half];
      v[i] = x1 * c[i] - x2 * s[i];
      v[i + half] = x2 * c[i] + x1 * s[i];
    }
  }
}
inline void RopeRow(float* x, int heads, int head_dim, const float* c, const float* s) {
  RopeRow(x, heads, head_dim, head_dim, c, s);
}

}  // namespace flatstate::cpu

#endif  // FLATSTATE_KERNELS_CPU_ATTENTION_MATH_H_
