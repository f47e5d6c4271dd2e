#include "kernels/recurrent_gates.h"

#include <algorithm>
#include <cmath>

namespace flatstate {
namespace {

inline float Silu(float x) { return x / (1.f + std::exp(-x)); }

inline float Softplus(float x) { return x > 20.f ? x : std::log1p(std::exp(x)); }

}  // namespace

template <>
void SiluRows<Device::kCpu>(float* x, int64_t rows, int64_t stride, int64_t dim) {
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = x + r * stride;
    for (int64_t i = 0; i < dim; ++i) xr[i] = Silu(xr[i]);
  }
}

template <>
void DeltaGates<Device::kCpu>(const float* a_in, const float* b_in, int64_t in_stride, int64_t rows,
                              int heads, const float* A_log, const float* dt_bias, float* g,
                              float* beta, int64_t out_stride) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int h = 0; h < heads; ++h) {
      const float a = a_in[r * in_stride + h], b = b_in[r * in_stride + h];
      g[r * out_stride + h] = -std::exp(A_log[h]) * Softplus(a + dt_bias[h]);
      beta[r * out_stride + h] = 1.f / (1.f + std::exp(-b));
    }
  }
}

template <>
void DeltaBeta<Device::kCpu>(const float* b_in, int64_t in_stride, int64_t rows, int heads,
                             float scale, float* beta, int64_t out_stride) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int h = 0; h < heads; ++h) {
      const float s = b_in == nullptr ? 1.f : 1.f / (1.f + std::exp(-b_in[r * in_stride + h]));
      beta[r * out_stride + h] = scale * s;
    }
  }
}

template <>
void SigmoidMulRows<Device::kCpu>(float* x, int64_t x_stride, const float* gate,
                                  int64_t gate_stride, int64_t rows, int64_t dim) {
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = x + r * x_stride;
    const float* gr = gate + r * gate_stride;
    for (int64_t i = 0; i < dim; ++i) xr[i] *= 1.f / (1.f + std::exp(-gr[i]));
  }
}

template <>
void GlaGates<Device::kCpu>(float* x, int64_t rows, int64_t stride, int64_t dim, const float* bias,
                            float normalizer, float clamp_min) {
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = x + r * stride;
    for (int64_t i = 0; i < dim; ++i) {
      const float a = xr[i] + bias[i];
      const float ls = std::min(a, 0.f) - std::log1p(std::exp(-std::abs(a)));
      xr[i] = std::max(ls / normalizer, clamp_min);
    }
  }
}

template <>
void SsmGates<Device::kCpu>(const float* dt_in, int64_t in_stride, int64_t rows, int heads,
                            const float* A_log, const float* dt_bias, float dt_min, float dt_max,
                            float* g, float* dt, int64_t out_stride) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int h = 0; h < heads; ++h) {
      const float d =
          std::min(std::max(Softplus(dt_in[r * in_stride + h] + dt_bias[h]), dt_min), dt_max);
      dt[r * out_stride + h] = d;
      g[r * out_stride + h] = -std::exp(A_log[h]) * d;
    }
  }
}

template <>
void ScaleHeads<Device::kCpu>(const float* x, int64_t x_stride, const float* s, int64_t s_stride,
                              int64_t rows, int heads, int head_dim, float* out,
                              int64_t out_stride) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int h = 0; h < heads; ++h) {
      const float sh = s[r * s_stride + h];
      const float* xh = x + r * x_stride + static_cast<int64_t>(h) * head_dim;
      float* oh = out + r * out_stride + static_cast<int64_t>(h) * head_dim;
      for (int i = 0; i < head_dim; ++i) oh[i] = sh * xh[i];
    }
  }
}

template <>
void AddScaledHeads<Device::kCpu>(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                                  const float* s, int64_t rows, int heads, int head_dim) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int h = 0; h < heads; ++h) {
      const float* xh = x + r * x_stride + static_cast<int64_t>(h) * head_dim;
      float* yh = y + r * y_stride + static_cast<int64_t>(h) * head_dim;
      for (int i = 0; i < head_dim; ++i) yh[i] += s[h] * xh[i];
    }
  }
}

template <>
void GatedHeadRmsNorm<Device::kCpu>(float* x, int64_t x_stride, const float* z, int64_t z_stride,
                                    int64_t rows, int heads, int head_dim, const float* weight,
                                    int64_t weight_stride, float eps, GateOrder order) {
  const bool gate_first = order == GateOrder::kGateThenNorm;
  for (int64_t r = 0; r < rows; ++r) {
    for (int h = 0; h < heads; ++h) {
      float* xh = x + r * x_stride + static_cast<int64_t>(h) * head_dim;
      const float* zh = z + r * z_stride + static_cast<int64_t>(h) * head_dim;
      const float* wh = weight + h * weight_stride;
      if (gate_first) {
        for (int i = 0; i < head_dim; ++i) xh[i] *= Silu(zh[i]);
      }
      double ss = 0;
      for (int i = 0; i < head_dim; ++i) ss += static_cast<double>(xh[i]) * xh[i];
      const float inv = static_cast<float>(1.0 / std::sqrt(ss / head_dim + eps));
      if (gate_first) {
        for (int i = 0; i < head_dim; ++i) xh[i] = xh[i] * inv * wh[i];
      } else {
        for (int i = 0; i < head_dim; ++i) xh[i] = xh[i] * inv * wh[i] * Silu(zh[i]);
      }
    }
  }
}

}  // namespace flatstate
