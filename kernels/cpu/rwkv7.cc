// The CPU bodies of kernels/rwkv7.h: plain loops in a fixed order (vectorised by the compiler,
// no reassociation).
#include "kernels/rwkv7.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/sequence_heads.h"

namespace flatstate {
namespace {

constexpr float kLogDecayScale = -0.6065306597126334f;  // -exp(-0.5)

inline float Sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

}  // namespace

template <>
void TokenShiftMix<Device::kCpu>(const float* x, const float* d, const float* mu, int n_mu,
                                 int64_t rows, int64_t dim, float* out) {
  for (int j = 0; j < n_mu; ++j) {
    const float* m = mu + j * dim;
    float* o = out + j * rows * dim;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < dim; ++c) o[r * dim + c] = x[r * dim + c] + d[r * dim + c] * m[c];
    }
  }
}

template <>
void ActivateRows<Device::kCpu>(float* x, int64_t rows, int64_t dim, Activation act) {
  const int64_t n = rows * dim;
  switch (act) {
    case Activation::kSigmoid:
      for (int64_t i = 0; i < n; ++i) x[i] = Sigmoid(x[i]);
      break;
    case Activation::kTanh:
      for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i]);
      break;
    case Activation::kReluSquared:
      for (int64_t i = 0; i < n; ++i) {
        const float v = x[i] > 0.f ? x[i] : 0.f;
        x[i] = v * v;
      }
      break;
    case Activation::kRwkvLogDecay:
      for (int64_t i = 0; i < n; ++i) x[i] = kLogDecayScale * Sigmoid(x[i]);
      break;
  }
}

template <>
void LerpToward<Device::kCpu>(float* v, const float* target, const float* z, int64_t rows,
                              int64_t dim) {
  const int64_t n = rows * dim;
  for (int64_t i = 0; i < n; ++i) v[i] += (target[i] - v[i]) * Sigmoid(z[i]);
}

template <>
void Rwkv7Keys<Device::kCpu>(float* k, const float* a, const float* k_k, const float* k_a,
                             int64_t rows, int heads, int head_dim, bool fused_l2, float* kk) {
  const int64_t D = int64_t{heads} * head_dim;
  for (int64_t r = 0; r < rows; ++r) {
    for (int h = 0; h < heads; ++h) {
      const int64_t off = r * D + int64_t{h} * head_dim;
      float* kr = k + off;
      float* kkr = kk + off;
      const float* kkw = k_k + int64_t{h} * head_dim;
      double n2 = 0;
      for (int i = 0; i < head_dim; ++i) {
        kkr[i] = kr[i] * kkw[i];
        n2 += static_cast<double>(kkr[i]) * kkr[i];
      }
      const double norm = fused_l2 ? std::sqrt(n2 + 1e-6) : std::max(std::sqrt(n2), 1e-12);
      const float inv = static_cast<float>(1.0 / norm);
      for (int i = 0; i < head_dim; ++i) kkr[i] *= inv;
      const float* ar = a + off;
      const float* ka = k_a + int64_t{h} * head_dim;
      for (int i = 0; i < head_dim; ++i) kr[i] = kr[i] * (1.f + (ar[i] - 1.f) * ka[i]);
    }
  }
}

template <>
absl::Status CheckRwkv7Shape<Device::kCpu>(int heads, int head_dim) {
  if (heads < 1 || head_dim < 1 || head_dim > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("rwkv7: ", heads, " heads of ", head_dim, " (want >= 1 heads of 1 to 1024)"));
  }
  return absl::OkStatus();
}

template <>
void Rwkv7Recurrence<Device::kCpu>(const Rwkv7Batch& b, const Parallel& par) {
  const int N = b.key_dim;
  const int64_t state = int64_t{N} * N;
  cpu::ForEachSequenceHead(
      b, b.value_heads, par, [&](const LinearSeq&) { return Rwkv7Scratch(N, 1, b.chunk); },
      [&](const LinearSeq& sq, int h, float* base, float* scratch) {
        const int64_t hn = int64_t{h} * N;
        Rwkv7HeadRows x;
        x.r = b.q + sq.row * b.qk_stride + hn;
        x.k = b.k + sq.row * b.qk_stride + hn;
        x.v = b.v + sq.row * b.v_stride + hn;
        x.logw = b.logw + sq.row * b.wka_stride + hn;
        x.kk = b.kk + sq.row * b.wka_stride + hn;
        x.a = b.a + sq.row * b.wka_stride + hn;
        x.out = b.out + sq.row * b.out_stride + hn;
        x.qk_stride = b.qk_stride;
        x.v_stride = b.v_stride;
        x.wka_stride = b.wka_stride;
        x.out_stride = b.out_stride;
        float* S = base + b.s_off + h * state;
        // The recurrent form for every T (prefill too): see kernels/rwkv7.h.
        Rwkv7StepCpu(N, x, sq.T, S, scratch);
        cpu::RecordStep(sq, S, state);
      });
}

template <>
void Rwkv7Output<Device::kCpu>(float* o, const float* r, const float* k, const float* v,
                               const float* g, const float* r_k, const float* gn_w,
                               const float* gn_b, int64_t rows, int heads, int head_dim,
                               float eps) {
  const int64_t D = int64_t{heads} * head_dim;
  for (int64_t row = 0; row < rows; ++row) {
    for (int h = 0; h < heads; ++h) {
      const int64_t off = row * D + int64_t{h} * head_dim, c0 = int64_t{h} * head_dim;
      float* oh = o + off;
      double sum = 0, bonus = 0;
      for (int i = 0; i < head_dim; ++i) {
        sum += oh[i];
        bonus += static_cast<double>(r[off + i]) * k[off + i] * r_k[c0 + i];
      }
      const double mean = sum / head_dim;
      double var = 0;
      for (int i = 0; i < head_dim; ++i) var += (oh[i] - mean) * (oh[i] - mean);
      const float inv = static_cast<float>(1.0 / std::sqrt(var / head_dim + eps));
      const float m = static_cast<float>(mean), bf = static_cast<float>(bonus);
      for (int i = 0; i < head_dim; ++i) {
        const float n = (oh[i] - m) * inv * gn_w[c0 + i] + gn_b[c0 + i];
        oh[i] = (n + bf * v[off + i]) * g[off + i];
      }
    }
  }
}

}  // namespace flatstate
