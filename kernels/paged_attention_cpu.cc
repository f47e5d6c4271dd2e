// CPU bodies of kernels/paged_attention.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/bf16.h"
#include "kernels/cpu/attention_math.h"
#include "kernels/cpu/dot.h"
#include "kernels/paged_attention.h"

namespace flatstate {
namespace {

using cpu::Dot;
using cpu::RopeAngles;
using cpu::RopeRow;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// A group of query rows of one session at consecutive positions (a prefill run), or one row.
struct QueryTile {
  int64_t first = 0;  // index into `rows`
  int n = 0;
};

// Tiles of at most kQueryTile rows: consecutive entries of `rows` with the same block table and
// consecutive contexts. Rows keep their order; the split never changes a row's floats.
std::vector<QueryTile> Tiles(const PagedRow* rows, int64_t n) {
  std::vector<QueryTile> tiles;
  for (int64_t i = 0; i < n;) {
    QueryTile t{i, 1};
    while (t.n < kQueryTile && i + t.n < n && rows[i + t.n].table == rows[i].table &&
           rows[i + t.n].ctx == rows[i].ctx + t.n) {
      ++t.n;
    }
    tiles.push_back(t);
    i += t.n;
  }
  return tiles;
}

// Heads [h0, h1) of one tile run together: K/V rows are located once per key for all of them.
constexpr int kHeadsPerTask = 2;

// The K and V rows of key positions [t0, t0 + len) of `layer`, from element `off` on (the task's
// heads, `width` floats): pointers into a kF32 pool, or widened (exact) into `kbuf` / `vbuf`
// (len * width floats each) from kBf16.
void KeyRows(const PagedKv& kv, const int32_t* table, int layer, int64_t t0, int len, int64_t off,
             int width, float* kbuf, float* vbuf, const float** krow, const float** vrow) {
  for (int j = 0; j < len; ++j) {
    const int64_t t = t0 + j;
    const int32_t block = table[t / kv.block_size];
    const int slot = static_cast<int>(t % kv.block_size);
    if (kv.dtype == KvDtype::kF32) {
      krow[j] = kv.Row(block, layer, 0, slot) + off;
      vrow[j] = kv.Row(block, layer, 1, slot) + off;
      continue;
    }
    const uint16_t* ks = kv.Bf16Row(block, layer, 0, slot) + off;
    const uint16_t* vs = kv.Bf16Row(block, layer, 1, slot) + off;
    float* kd = kbuf + static_cast<int64_t>(j) * width;
    float* vd = vbuf + static_cast<int64_t>(j) * width;
    for (int d = 0; d < width; ++d) kd[d] = FloatFromBf16(ks[d]);
    for (int d = 0; d < width; ++d) vd[d] = FloatFromBf16(vs[d]);
    krow[j] = kd;
    vrow[j] = vd;
  }
}

// Per-thread working memory of AttendTile.
struct TileScratch {
  std::vector<float> kbuf, vbuf;  // kKeyTile widened rows of the task's heads (bf16 pools)
  std::vector<float> acc;         // [row][head][hd]: running weighted sum of V
  void Fit(int width) {
    const size_t rows = static_cast<size_t>(kKeyTile) * width;
    if (kbuf.size() < rows) kbuf.resize(rows), vbuf.resize(rows);
    if (acc.size() < static_cast<size_t>(kQueryTile) * width) acc.resize(kQueryTile * width);
  }
};

// Online softmax of one tile's rows over their contexts for heads [h0, h1), key group by key
// group; per (row, head) one fixed chain.
void AttendTile(const PagedKv& kv, const int32_t* tables, const PagedRow* rows, QueryTile tile,
                int h0, int h1, const float* qkv, int64_t stride, float* out, int64_t out_stride,
                int layer, int hd, TileScratch* s) {
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  const int nh = h1 - h0, width = nh * hd;
  const int64_t off = static_cast<int64_t>(h0) * hd;
  const int32_t* table = tables + rows[tile.first].table;
  float m[kQueryTile * kHeadsPerTask], l[kQueryTile * kHeadsPerTask];
  std::fill(m, m + tile.n * nh, kNegInf);
  std::fill(l, l + tile.n * nh, 0.f);
  std::fill(s->acc.begin(), s->acc.begin() + static_cast<int64_t>(tile.n) * width, 0.f);
  const int64_t ctx_max = rows[tile.first + tile.n - 1].ctx;
  const float* krow[kKeyTile];
  const float* vrow[kKeyTile];
  float p[kKeyTile];
  for (int64_t t0 = 0; t0 < ctx_max; t0 += kKeyTile) {
    const int len = static_cast<int>(std::min<int64_t>(kKeyTile, ctx_max - t0));
    KeyRows(kv, table, layer, t0, len, off, width, s->kbuf.data(), s->vbuf.data(), krow, vrow);
    for (int i = 0; i < tile.n; ++i) {
      const PagedRow& r = rows[tile.first + i];
      const int keys = static_cast<int>(std::min<int64_t>(len, r.ctx - t0));  // row's own keys
      if (keys <= 0) continue;
      const float* q = qkv + r.row * stride + off;
      for (int h = 0; h < nh; ++h) {
        const int64_t ho = static_cast<int64_t>(h) * hd;
        float mx = kNegInf;
        for (int j = 0; j < keys; ++j) {
          p[j] = Dot(q + ho, krow[j] + ho, hd) * scale;
          mx = std::max(mx, p[j]);
        }
        float& mi = m[i * nh + h];
        float& li = l[i * nh + h];
        float* a = s->acc.data() + static_cast<int64_t>(i) * width + ho;
        const float m_new = std::max(mi, mx);
        const float corr = mi == kNegInf ? 0.f : std::exp(mi - m_new);
        float sum = 0.f;
        for (int j = 0; j < keys; ++j) {
          p[j] = std::exp(p[j] - m_new);
          sum += p[j];
        }
        li = li * corr + sum;
        mi = m_new;
        for (int d = 0; d < hd; ++d) a[d] *= corr;
        for (int j = 0; j < keys; ++j) {
          const float* v = vrow[j] + ho;
          for (int d = 0; d < hd; ++d) a[d] += p[j] * v[d];
        }
      }
    }
  }
  for (int i = 0; i < tile.n; ++i) {
    float* o = out + rows[tile.first + i].row * out_stride + off;
    for (int h = 0; h < nh; ++h) {
      const float li = l[i * nh + h];
      const float inv = li > 0.f ? 1.f / li : 0.f;  // ctx 0: nothing to attend to gives zeros
      const float* a = s->acc.data() + static_cast<int64_t>(i) * width + h * hd;
      for (int d = 0; d < hd; ++d) o[h * hd + d] = a[d] * inv;
    }
  }
}

}  // namespace

absl::string_view KvDtypeName(KvDtype d) { return d == KvDtype::kBf16 ? "bf16" : "f32"; }

absl::StatusOr<KvDtype> ParseKvDtype(absl::string_view name) {
  for (KvDtype d : {KvDtype::kF32, KvDtype::kBf16}) {
    if (KvDtypeName(d) == name) return d;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("kv_dtype: unknown type '", name, "' (expected f32 or bf16)"));
}

template <>
absl::Status CheckPagedAttentionShape<Device::kCpu>(int /*head_dim*/, KvDtype /*dtype*/) {
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
      const int32_t block = table[pos / kv.block_size];
      const int slot = static_cast<int>(pos % kv.block_size);
      for (int which = 0; which < 2; ++which) {
        const float* src = row + (1 + which) * hidden;
        if (kv.dtype == KvDtype::kF32) {
          std::memcpy(kv.Row(block, layer, which, slot), src, sizeof(float) * hidden);
        } else {
          uint16_t* dst = kv.Bf16Row(block, layer, which, slot);
          for (int d = 0; d < hidden; ++d) dst[d] = Bf16FromFloat(src[d]);
        }
      }
    }
  });
}

template <>
void PagedAttention<Device::kCpu>(const PagedKv& kv, const int32_t* tables, const PagedRow* rows,
                                  int64_t n, const float* qkv, int64_t stride, float* out,
                                  int64_t out_stride, int layer, int heads, int head_dim,
                                  const Parallel& par) {
  // One task per (tile, group of up to kHeadsPerTask heads): a long decode row's heads run in
  // parallel too, and a K/V row is located once per group.
  const std::vector<QueryTile> tiles = Tiles(rows, n);
  const int groups = (heads + kHeadsPerTask - 1) / kHeadsPerTask;
  par.For(static_cast<int64_t>(tiles.size()) * groups, [&](int64_t b, int64_t e) {
    thread_local TileScratch scratch;
    scratch.Fit(std::min(heads, kHeadsPerTask) * head_dim);
    for (int64_t i = b; i < e; ++i) {
      const int h0 = static_cast<int>(i % groups) * kHeadsPerTask;
      AttendTile(kv, tables, rows, tiles[i / groups], h0, std::min(heads, h0 + kHeadsPerTask), qkv,
                 stride, out, out_stride, layer, head_dim, &scratch);
    }
  });
}

}  // namespace flatstate
