#include "kernels/elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace flatstate {

template <>
void RmsNorm<Device::kCpu>(const float* x, const float* weight, int64_t rows, int64_t dim,
                           float eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / dim + eps));
    for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * inv * weight[i];
  }
}

template <>
void LayerNorm<Device::kCpu>(const float* x, const float* weight, const float* bias, int64_t rows,
                             int64_t dim, float eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    double sum = 0;
    for (int64_t i = 0; i < dim; ++i) sum += xr[i];
    const double mean = sum / dim;
    double var = 0;
    for (int64_t i = 0; i < dim; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    const float inv = static_cast<float>(1.0 / std::sqrt(var / dim + eps));
    const float m = static_cast<float>(mean);
    for (int64_t i = 0; i < dim; ++i) {
      yr[i] = (xr[i] - m) * inv * weight[i] + (bias != nullptr ? bias[i] : 0.f);
    }
  }
}

namespace {

// erf for floats as a rational function of x on [-4, 4] (|erf(x)| rounds to 1 beyond): the
// minimax approximation Eigen and XLA use, |error| about 1e-7 absolute
// (tests/kernels/elementwise_test.cc measures it against double erf). Branch-free, so the loop
// below vectorises, unlike calls to std::erf.
inline float ErfRational(float v) {
  float x = v < -4.f ? -4.f : v;  // value selects (not std::min/max, which return references
  x = x > 4.f ? 4.f : x;          // and keep the loop below from vectorising)
  const float x2 = x * x;
  float p = x2 * -2.72614225801306e-10f + 2.77068142495902e-08f;
  p = x2 * p + -2.10102402082508e-06f;
  p = x2 * p + -5.69250639462346e-05f;
  p = x2 * p + -7.34990630326855e-04f;
  p = x2 * p + -2.95459980854025e-03f;
  p = x2 * p + -1.60960333262415e-02f;
  float q = x2 * -1.45660718464996e-05f + -2.13374055278905e-04f;
  q = x2 * q + -1.68282697438203e-03f;
  q = x2 * q + -7.37332916720468e-03f;
  q = x2 * q + -1.42647390514189e-02f;
  return x * p / q;
}

}  // namespace

template <>
void HeadRmsNorm<Device::kCpu>(float* x, int64_t rows, int64_t stride, int heads, int head_dim,
                               const float* weight, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    RmsNorm<Device::kCpu>(x + r * stride, weight, heads, head_dim, eps, x + r * stride);
  }
}

template <>
void AddBias<Device::kCpu>(float* y, const float* bias, int64_t rows, int64_t dim) {
  for (int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * dim;
    for (int64_t c = 0; c < dim; ++c) yr[c] += bias[c];
  }
}

template <>
void SwiGlu<Device::kCpu>(const float* in, int64_t rows, int64_t F, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = in + r * 2 * F;
    const float* up = gate + F;
    float* o = out + r * F;
    for (int64_t i = 0; i < F; ++i) o[i] = gate[i] / (1.f + std::exp(-gate[i])) * up[i];
  }
}

template <>
void Gelu<Device::kCpu>(float* x, int64_t n) {
  constexpr float kInvSqrt2 = 0.70710678118654752f;
  for (int64_t i = 0; i < n; ++i) x[i] = 0.5f * x[i] * (1.f + ErfRational(x[i] * kInvSqrt2));
}

template <>
void AddInPlace<Device::kCpu>(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

namespace {

// Kernels up to this many taps (Mamba-2's and the delta rules' 4, RWKV's token shift 2) sum each
// channel in one pass; longer ones tap by tap.
constexpr int kConvTapsInRegisters = 8;

// o[c] = sum over taps i of src[i][c] * w[c * K + i], channel by channel, each channel's taps
// summed in tap order from 0 (the bits of a tap-by-tap loop, in one pass over the rows). kK: the
// taps when known at compile time (the common kernels; the loop then vectorises), else 0 and k.
template <int kK>
inline void ConvChannels(const float* const* src, const float* w, int64_t dim, float* o,
                         int k = kK) {
  const int K = kK > 0 ? kK : k;
  for (int64_t c = 0; c < dim; ++c) {
    float acc = 0.f;
    for (int i = 0; i < K; ++i) acc += src[i][c] * w[c * K + i];
    o[c] = acc;
  }
}

// One sequence of CausalConv<kCpu>; `window` is this layer's window, `steps` (or null) where
// the window after token t < T - 1 goes, at steps + t * steps_stride.
void CausalConvSeq(const float* in, int64_t T, int64_t dim, int K, const float* w, float* window,
                   float* steps, int64_t steps_stride, float* out) {
  const int64_t hist = K - 1;
  auto row = [&](int64_t f) -> const float* {  // row f of full = [window; in]
    return f < hist ? window + f * dim : in + (f - hist) * dim;
  };
  for (int64_t t = 0; t < T; ++t) {
    float* o = out + t * dim;
    if (K <= kConvTapsInRegisters) {
      const float* src[kConvTapsInRegisters];
      for (int i = 0; i < K; ++i) src[i] = row(t + i);
      switch (K) {
        case 2:
          ConvChannels<2>(src, w, dim, o);
          break;
        case 4:
          ConvChannels<4>(src, w, dim, o);
          break;
        default:
          ConvChannels<0>(src, w, dim, o, K);
      }
      continue;
    }
    std::memset(o, 0, sizeof(float) * dim);
    for (int i = 0; i < K; ++i) {
      const float* src = row(t + i);
      for (int64_t c = 0; c < dim; ++c) o[c] += src[c] * w[c * K + i];
    }
  }
  if (hist <= 0) return;
  for (int64_t t = 0; steps != nullptr && t + 1 < T; ++t) {  // after token t: rows t+1..t+hist
    for (int64_t r = 0; r < hist; ++r) {
      std::memcpy(steps + t * steps_stride + r * dim, row(t + 1 + r), sizeof(float) * dim);
    }
  }
  // New window = last `hist` rows of full (length hist + T).
  if (T < hist) {  // some of them are window rows: move those down first, then the inputs
    std::memmove(window, window + T * dim, sizeof(float) * (hist - T) * dim);
    std::memcpy(window + (hist - T) * dim, in, sizeof(float) * T * dim);
  } else {
    std::memcpy(window, in + (T - hist) * dim, sizeof(float) * hist * dim);
  }
}

}  // namespace

template <>
void CausalConv<Device::kCpu>(const float* in, int64_t dim, int K, const float* w,
                              const ConvSeq* seqs, int B, int64_t layer_offset, float* out) {
  for (int s = 0; s < B; ++s) {
    const ConvSeq& sq = seqs[s];
    CausalConvSeq(in + sq.row * dim, sq.T, dim, K, w, sq.window + layer_offset,
                  sq.steps == nullptr ? nullptr : sq.steps + layer_offset, sq.steps_stride,
                  out + sq.row * dim);
  }
}

template <>
void GatherRows<Device::kCpu>(const float* src, const int32_t* idx, int64_t n, int64_t dim,
                              float* dst) {
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(dst + i * dim, src + static_cast<int64_t>(idx[i]) * dim, sizeof(float) * dim);
  }
}

}  // namespace flatstate
