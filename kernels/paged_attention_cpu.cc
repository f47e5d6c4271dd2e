#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

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

}  // namespace flatstate
