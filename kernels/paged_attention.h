// Softmax attention over a paged KV cache (vLLM's PagedAttention layout), with the RoPE and K/V
// write that precede it.
//
// PagedKv describes the engine's block pool memory without owning it and is the one statement
// of its address formula: block b holds, for every layer l, K then V, each [block_size][hidden]
// fp32, i.e. row (b, l, kv, slot) starts at
//   base + (((b * num_layers + l) * 2 + kv) * block_size + slot) * hidden
// (PagedKv::RowOffset: the formula for any code that addresses pool memory, KvBlockPool too).
// Token t of a sequence lives in block table[t / block_size], slot t % block_size.
//
// The ops work on rows of one layer of a step: PagedRow i is query row rows[i].row of qkv (q at
// +0, k at +hidden, v at +2*hidden, row stride `stride`), at position rows[i].ctx - 1, whose
// session's block table starts at tables + rows[i].table. All pointers, the descriptor arrays
// included, are in the op's device memory. kCpu bodies run rows on `par`; kCuda bodies
// (paged_attention_gpu.cu) are asynchronous on cuda::Stream() and ignore `par`.
#ifndef FLATSTATE_KERNELS_PAGED_ATTENTION_H_
#define FLATSTATE_KERNELS_PAGED_ATTENTION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/device.h"
#include "kernels/parallel.h"

namespace flatstate {

struct PagedKv {
  float* base = nullptr;
  int block_size = 16;
  int num_layers = 0;
  int hidden = 0;

  // Floats from the pool's base to row `slot` of K (kv = 0) or V (kv = 1) of `layer` in `block`.
  FS_HOST_DEVICE static int64_t RowOffset(int32_t block, int layer, int kv, int slot,
                                          int block_size, int num_layers, int hidden) {
    return (((static_cast<int64_t>(block) * num_layers + layer) * 2 + kv) * block_size + slot) *
           static_cast<int64_t>(hidden);
  }
  FS_HOST_DEVICE float* Row(int32_t block, int layer, int kv, int slot) const {
    return base + RowOffset(block, layer, kv, slot, block_size, num_layers, hidden);
  }
  FS_HOST_DEVICE float* Key(const int32_t* table, int layer, int64_t t) const {
    return Row(table[t / block_size], layer, 0, static_cast<int>(t % block_size));
  }
  FS_HOST_DEVICE float* Value(const int32_t* table, int layer, int64_t t) const {
    return Row(table[t / block_size], layer, 1, static_cast<int>(t % block_size));
  }
};

// One query row of a batched call (see the top of this file).
struct PagedRow {
  int64_t row = 0;
  int64_t ctx = 0;    // context length: the row's position + 1
  int64_t table = 0;  // offset of the row's block table in `tables`
};

// OK when D's paged-attention kernels take head_dim (kCuda: their shared memory fits the default
// 48 KiB); InvalidArgument naming the limit otherwise. kCpu takes any head_dim.
template <Device D>
absl::Status CheckPagedAttentionShape(int head_dim);

// Rotate-half RoPE on q and k of every row (heads of head_dim, at position ctx - 1, angles in
// double), then the row's K and V written into its slot of `layer`. Each row's slot must be
// covered by its block table.
template <Device D>
void RopeAndWriteKv(const PagedKv& kv, const int32_t* tables, const PagedRow* rows, int64_t n,
                    float* qkv, int64_t stride, int layer, int heads, int head_dim, float theta,
                    const Parallel& par);

// out row rows[i].row, head h = softmax(q_h . K[0..ctx) / sqrt(hd)) V[0..ctx) for q_h that row's
// head h, over its session's context of `layer` (K/V already written for every position < ctx).
template <Device D>
void PagedAttention(const PagedKv& kv, const int32_t* tables, const PagedRow* rows, int64_t n,
                    const float* qkv, int64_t stride, float* out, int64_t out_stride, int layer,
                    int heads, int head_dim, const Parallel& par);

}  // namespace flatstate

#endif  // FLATSTATE_KERNELS_PAGED_ATTENTION_H_
