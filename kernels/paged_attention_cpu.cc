#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/paged_attention.h"

namespace flatstate {

template <>
void PagedAttention<Device::kCpu>(const PagedKv& kv, const int32_t* table, int layer, int head,
                                  int head_dim, const float* q, int64_t ctx, float* out,
                                  float* scratch) {
  const float scale = 1.f / std::sqrt(static_cast<float>(head_dim));
  const int64_t off = static_cast<int64_t>(head) * head_dim;
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t t = 0; t < ctx; ++t) {
    const float* k = kv.Key(table, layer, t) + off;
    float s = 0.f;
    for (int d = 0; d < head_dim; ++d) s += q[d] * k[d];
    scratch[t] = s * scale;
    mx = std::max(mx, scratch[t]);
  }
  double sum = 0;
  for (int64_t t = 0; t < ctx; ++t) {
    scratch[t] = std::exp(scratch[t] - mx);
    sum += scratch[t];
  }
  const float inv = static_cast<float>(1.0 / sum);
  std::memset(out, 0, sizeof(float) * head_dim);
  for (int64_t t = 0; t < ctx; ++t) {
    const float p = scratch[t] * inv;
    const float* v = kv.Value(table, layer, t) + off;
    for (int d = 0; d < head_dim; ++d) out[d] += p * v[d];
  }
}

template <>
void PagedAttentionAllHeads<Device::kCpu>(const PagedKv& kv, const int32_t* table, int layer,
                                          int heads, int head_dim, const float* q, int64_t ctx,
                                          float* out, float* scratch) {
  const float scale = 1.f / std::sqrt(static_cast<float>(head_dim));
  for (int64_t t = 0; t < ctx; ++t) {
    const float* k = kv.Key(table, layer, t);
    for (int h = 0; h < heads; ++h) {
      const float* qh = q + static_cast<int64_t>(h) * head_dim;
      const float* kh = k + static_cast<int64_t>(h) * head_dim;
      float s = 0.f;
      for (int d = 0; d < head_dim; ++d) s += qh[d] * kh[d];
      scratch[h * ctx + t] = s * scale;
    }
  }
  std::vector<float> inv(heads);
  for (int h = 0; h < heads; ++h) {
    float* sc = scratch + h * ctx;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t t = 0; t < ctx; ++t) mx = std::max(mx, sc[t]);
    double sum = 0;
    for (int64_t t = 0; t < ctx; ++t) {
      sc[t] = std::exp(sc[t] - mx);
      sum += sc[t];
    }
    inv[h] = static_cast<float>(1.0 / sum);
  }
  std::memset(out, 0, sizeof(float) * heads * head_dim);
  for (int64_t t = 0; t < ctx; ++t) {
    const float* v = kv.Value(table, layer, t);
    for (int h = 0; h < heads; ++h) {
      const float p = scratch[h * ctx + t] * inv[h];
      const float* vh = v + static_cast<int64_t>(h) * head_dim;
      float* oh = out + static_cast<int64_t>(h) * head_dim;
      for (int d = 0; d < head_dim; ++d) oh[d] += p * vh[d];
    }
  }
}

}  // namespace flatstate
