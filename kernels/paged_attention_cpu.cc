#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/dot.h"
#include "kernels/paged_attention.h"

namespace flatstate {
namespace {

using cpu::Dot;

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

}  // namespace

template <>
void PagedAttention<Device::kCpu>(const PagedKv& kv, const int32_t* table, int layer, int head,
                                  int head_dim, const float* q, int64_t ctx, float* out,
                                  float* scratch) {
  const float scale = 1.f / std::sqrt(static_cast<float>(head_dim));
  const int64_t off = static_cast<int64_t>(head) * head_dim;
  for (int64_t t = 0; t < ctx; ++t) {
    scratch[t] = Dot(q, kv.Key(table, layer, t) + off, head_dim) * scale;
  }
  const float inv = ExpNormaliser(scratch, ctx);
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
      scratch[h * ctx + t] = Dot(qh, kh, head_dim) * scale;
    }
  }
  std::vector<float> inv(heads);
  for (int h = 0; h < heads; ++h) inv[h] = ExpNormaliser(scratch + h * ctx, ctx);
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
