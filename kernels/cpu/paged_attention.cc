// CPU bodies of kernels/paged_attention.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/bf16.h"
#include "kernels/cpu/attend_tile.h"
#include "kernels/cpu/attention_math.h"
#include "kernels/gemm.h"
#include "kernels/paged_attention.h"

namespace flatstate {
namespace {

using cpu::RopeAngles;
using cpu::RopeRow;

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

// Heads per task: a tile's heads in as few slices as still give every thread a task, rounded up
// to an even count (the AVX-512 body takes heads two at a time). Fewer, wider slices read each
// K/V row in longer contiguous runs; a batch-1 decode row still spreads over all threads.
int HeadsPerTask(int heads, int64_t tiles, int threads) {
  const int64_t slices = std::clamp<int64_t>((threads + tiles - 1) / tiles, 1, heads);
  int per = static_cast<int>((heads + slices - 1) / slices);
  per += per % 2;
  return std::min(per, heads);
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

std::vector<double> RopeInvFreq(double theta, int rotary_dim) {
  std::vector<double> inv(rotary_dim / 2);
  for (int i = 0; i < rotary_dim / 2; ++i) inv[i] = std::pow(theta, -2.0 * i / rotary_dim);
  return inv;
}

template <>
void RopeAndWriteKv<Device::kCpu>(const PagedKv& kv, const int32_t* tables, const PagedRow* rows,
                                  int64_t n, float* qkv, int64_t stride, int layer,
                                  const AttentionShape& shape, const RopeTable& rope,
                                  const Parallel& par) {
  const int q_width = shape.q_width(), kv_width = shape.kv_width(), hd = shape.head_dim;
  par.For(n, [&](int64_t b, int64_t e) {
    std::vector<float> c(rope.rotary_dim / 2), s(rope.rotary_dim / 2);
    for (int64_t i = b; i < e; ++i) {
      const PagedRow& r = rows[i];
      const int64_t pos = r.ctx - 1;
      float* row = qkv + r.row * stride;
      RopeAngles(pos, rope.inv_freq, rope.rotary_dim / 2, c.data(), s.data());  // once for q, k
      RopeRow(row, shape.heads, hd, rope.rotary_dim, c.data(), s.data());           // q
      RopeRow(row + q_width, shape.kv_heads, hd, rope.rotary_dim, c.data(), s.data());  // k
      const int32_t* table = tables + r.table;
      const int32_t block = table[pos / kv.block_size];
      const int slot = static_cast<int>(pos % kv.block_size);
      for (int which = 0; which < 2; ++which) {
        const float* src = row + q_width + which * kv_width;
        if (kv.dtype == KvDtype::kF32) {
          std::memcpy(kv.Row(block, layer, which, slot), src, sizeof(float) * kv_width);
        } else {
          uint16_t* dst = kv.Bf16Row(block, layer, which, slot);
          for (int d = 0; d < kv_width; ++d) dst[d] = Bf16FromFloat(src[d]);
        }
      }
    }
  });
}

template <>
void PagedAttention<Device::kCpu>(const PagedKv& kv, const int32_t* tables, const PagedRow* rows,
                                  int64_t n, const float* qkv, int64_t stride, float* out,
                                  int64_t out_stride, int layer, const AttentionShape& shape,
                                  const Parallel& par) {
  const int heads = shape.heads, head_dim = shape.head_dim;
  // One task per (tile, slice of heads); a K/V row is located once per task.
  const std::vector<QueryTile> tiles = Tiles(rows, n);
  const int per = HeadsPerTask(heads, static_cast<int64_t>(tiles.size()), par.num_threads());
  const int groups = (heads + per - 1) / per;
  // The vector body of the ISA the GEMM runs (SetGemmIsa selects both) when it fits the head
  // size; the scalar body otherwise. All give the same bits (kernels/cpu/attend_tile.h).
  void (*body)(const cpu::AttendTask&, cpu::AttendScratch*) = cpu::AttendTileScalar;
  if (cpu::AttendSimdFits(head_dim)) {
    if (ActiveGemmIsa() == GemmIsa::kAvx512) body = cpu::AttendTileAvx512;
    if (ActiveGemmIsa() == GemmIsa::kAvx2) body = cpu::AttendTileAvx2;
  }
  par.For(static_cast<int64_t>(tiles.size()) * groups, [&](int64_t b, int64_t e) {
    thread_local cpu::AttendScratch scratch;
    for (int64_t i = b; i < e; ++i) {
      // Tiles in the order first, last, second, second to last, ...: a prefill's later tiles
      // attend to more keys, and the pool hands out contiguous ranges of tasks, so this evens
      // the work of the ranges (which thread runs a task never changes its bits).
      const int64_t j = i / groups, nt = static_cast<int64_t>(tiles.size());
      const QueryTile& tile = tiles[j % 2 == 0 ? j / 2 : nt - 1 - j / 2];
      cpu::AttendTask task;
      task.kv = &kv;
      task.table = tables + rows[tile.first].table;
      task.rows = rows + tile.first;
      task.n = tile.n;
      task.h0 = static_cast<int>(i % groups) * per;
      task.h1 = std::min(heads, task.h0 + per);
      task.qkv = qkv;
      task.stride = stride;
      task.out = out;
      task.out_stride = out_stride;
      task.layer = layer;
      task.hd = head_dim;
      task.group = shape.group();
      body(task, &scratch);
    }
  });
}

}  // namespace flatstate
