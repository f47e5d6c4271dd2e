// CPU bodies of kernels/paged_attention.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/attention_math.h"
#include "kernels/cpu/dot.h"
#include "kernels/paged_attention.h"

namespace flatstate {
namespace {

using cpu::Dot;
using cpu::ExpNormaliser;
using cpu::RopeAngles;
using cpu::RopeRow;

// All heads of one query row at once: q and out hold heads * head_dim floats. Reads each K and V
// row once (a per-head loop would stream the whole cache once per head). scratch holds
// heads * ctx floats, inv `heads`.
void AttendAllHeads(const PagedKv& kv, const int32_t* table, int layer, int heads, int head_dim,
                    const float* q, int64_t ctx, float* out, float* scratch, float* inv) {
  const float scale = 1.f / std::sqrt(static_cast<float>(head_dim));
  for (int64_t t = 0; t < ctx; ++t) {
    const float* k = kv.Key(table, layer, t);
    for (int h = 0; h < heads; ++h) {
      const float* qh = q + static_cast<int64_t>(h) * head_dim;
      const float* kh = k + static_cast<int64_t>(h) * head_dim;
      scratch[h * ctx + t] = Dot(qh, kh, head_dim) * scale;
    }
  }
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

}  // namespace

template <>
absl::Status CheckPagedAttentionShape<Device::kCpu>(int /*head_dim*/) {
  return absl::OkStatus();
}

template <>
void RopeAndWriteKv<Device::kCpu>(const PagedKv& kv, const int32_t* tables, const PagedRow* rows,
                                  int64_t n, float* qkv, int64_t stride, int layer, int heads,
                                  int head_dim, float theta, const Parallel& par) {
  const int hidden = kv.hidden;
  par.For(n, [&](int64_t b, int64_t e) {
    std::vector<float> c(head_dim / 2), s(head_dim / 2);
    for (int64_t i = b; i < e; ++i) {
      const PagedRow& r = rows[i];
      const int64_t pos = r.ctx - 1;
      float* row = qkv + r.row * stride;
      RopeAngles(pos, head_dim, theta, c.data(), s.data());        // once for q and k
      RopeRow(row, heads, head_dim, c.data(), s.data());           // q
      RopeRow(row + hidden, heads, head_dim, c.data(), s.data());  // k
      const int32_t* table = tables + r.table;
      std::memcpy(kv.Key(table, layer, pos), row + hidden, sizeof(float) * hidden);
      std::memcpy(kv.Value(table, layer, pos), row + 2 * hidden, sizeof(float) * hidden);
    }
  });
}

template <>
void PagedAttention<Device::kCpu>(const PagedKv& kv, const int32_t* tables, const PagedRow* rows,
                                  int64_t n, const float* qkv, int64_t stride, float* out,
                                  int64_t out_stride, int layer, int heads, int head_dim,
                                  const Parallel& par) {
  // One task per query row, all heads at once.
  par.For(n, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> scratch;
    std::vector<float> inv(heads);
    for (int64_t i = b; i < e; ++i) {
      const PagedRow& r = rows[i];
      if (scratch.size() < static_cast<size_t>(heads * r.ctx)) scratch.resize(heads * r.ctx);
      AttendAllHeads(kv, tables + r.table, layer, heads, head_dim, qkv + r.row * stride, r.ctx,
                     out + r.row * out_stride, scratch.data(), inv.data());
    }
  });
}

}  // namespace flatstate
