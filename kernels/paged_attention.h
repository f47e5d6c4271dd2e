// Softmax attention over a paged KV cache (vLLM's PagedAttention layout), with the RoPE and K/V
// write that precede it.
//
// PagedKv describes the engine's block pool memory without owning it and is the one statement
// of its address formula: block b holds, for every layer l, K then V, each [block_size][hidden]
// elements of the pool's KvDtype (fp32, or bf16: --kv_dtype), i.e. row (b, l, kv, slot) starts
// at element
//   (((b * num_layers + l) * 2 + kv) * block_size + slot) * hidden
// (PagedKv::RowOffset: the formula for any code that addresses pool memory, KvBlockPool too).
// Token t of a sequence lives in block table[t / block_size], slot t % block_size.
//
// The ops work on rows of one layer of a step: PagedRow i is query row rows[i].row of qkv (q at
// +0, heads * head_dim elements; k at +heads * head_dim and v after it, kv_heads * head_dim each:
// AttentionShape; row stride `stride`), at position rows[i].ctx - 1, whose session's block table
// starts at tables + rows[i].table. A pool row holds one position's K (or V) of every K/V head,
// so PagedKv::hidden is kv_heads * head_dim. All pointers, the descriptor arrays
// included, are in the op's device memory. kCpu bodies run rows on `par`; kCuda bodies
// (cuda/paged_attention.cu) are asynchronous on cuda::Stream() and ignore `par`.
#ifndef FLATSTATE_KERNELS_PAGED_ATTENTION_H_
#define FLATSTATE_KERNELS_PAGED_ATTENTION_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/device.h"
#include "kernels/parallel.h"

namespace flatstate {

// Element type of the K/V cache. bf16 halves the bytes a decode step reads; a row is rounded to
// the nearest-even bf16 once, when it is written, and widened exactly when it is read.
enum class KvDtype : uint8_t { kF32, kBf16 };
absl::string_view KvDtypeName(KvDtype d);  // "f32" | "bf16"
// Parses --kv_dtype; InvalidArgument naming the flag and the accepted values otherwise.
absl::StatusOr<KvDtype> ParseKvDtype(absl::string_view name);
inline constexpr size_t KvDtypeBytes(KvDtype d) { return d == KvDtype::kBf16 ? 2 : 4; }

struct PagedKv {
  void* base = nullptr;
  int block_size = 16;
  int num_layers = 0;
  int hidden = 0;
  KvDtype dtype = KvDtype::kF32;

  // Floats from the pool's base to row `slot` of K (kv = 0) or V (kv = 1) of `layer` in `block`.
  FS_HOST_DEVICE static int64_t RowOffset(int32_t block, int layer, int kv, int slot,
                                          int block_size, int num_layers, int hidden) {
    return (((static_cast<int64_t>(block) * num_layers + layer) * 2 + kv) * block_size + slot) *
           static_cast<int64_t>(hidden);
  }
  // kF32 pools: the row's floats. kBf16 pools: Bf16Row, its 16-bit elements.
  FS_HOST_DEVICE float* Row(int32_t block, int layer, int kv, int slot) const {
    return static_cast<float*>(base) +
           RowOffset(block, layer, kv, slot, block_size, num_layers, hidden);
  }
  FS_HOST_DEVICE uint16_t* Bf16Row(int32_t block, int layer, int kv, int slot) const {
    return static_cast<uint16_t*>(base) +
           RowOffset(block, layer, kv, slot, block_size, num_layers, hidden);
  }
  FS_HOST_DEVICE float* Key(const int32_t* table, int layer, int64_t t) const {
    return Row(table[t / block_size], layer, 0, static_cast<int>(t % block_size));
  }
  FS_HOST_DEVICE float* Value(const int32_t* table, int layer, int64_t t) const {
    return Row(table[t / block_size], layer, 1, static_cast<int>(t % block_size));
  }
};

// The heads of one softmax layer: `heads` query heads of head_dim elements sharing `kv_heads` K/V
// heads (grouped-query attention: query head h reads K/V head h / (heads / kv_heads); kv_heads ==
// heads is multi-head attention). heads must be a multiple of kv_heads.
struct AttentionShape {
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int q_width() const { return heads * head_dim; }
  int kv_width() const { return kv_heads * head_dim; }
  int group() const { return heads / kv_heads; }
};

// RoPE of a softmax layer: rotate-half over the first rotary_dim elements of every q and k head
// (pairs i and i + rotary_dim / 2), angle pos * inv_freq[i] for i < rotary_dim / 2, computed in
// double; the elements past rotary_dim are left as they are. inv_freq is in the op's device
// memory.
struct RopeTable {
  const double* inv_freq = nullptr;
  int rotary_dim = 0;
};

// The inverse frequencies theta^(-2i / rotary_dim), i < rotary_dim / 2 (unscaled RoPE; the
// engine's ModelConfig::RopeInvFreq applies a model's rope_scaling to these).
std::vector<double> RopeInvFreq(double theta, int rotary_dim);

// One query row of a batched call (see the top of this file).
struct PagedRow {
  int64_t row = 0;
  int64_t ctx = 0;    // context length: the row's position + 1
  int64_t table = 0;  // offset of the row's block table in `tables`
};

// OK when D's paged-attention kernels take head_dim and the pool's dtype (kCuda: their shared
// memory fits the default 48 KiB; kF32 only). InvalidArgument / Unimplemented naming the limit
// otherwise. kCpu takes any head_dim and both dtypes.
template <Device D>
absl::Status CheckPagedAttentionShape(int head_dim, KvDtype dtype);

// RoPE (`rope`) on q and k of every row at position ctx - 1, then the row's K and V written into
// its slot of `layer`. Each row's slot must be covered by its block table.
template <Device D>
void RopeAndWriteKv(const PagedKv& kv, const int32_t* tables, const PagedRow* rows, int64_t n,
                    float* qkv, int64_t stride, int layer, const AttentionShape& shape,
                    const RopeTable& rope, const Parallel& par);

// out row rows[i].row, head h = softmax(q_h . K[0..ctx) / sqrt(hd)) V[0..ctx) for q_h that row's
// head h and K, V those of h's K/V head, over its session's context of `layer` (K/V already
// written for every position < ctx).
//
// kCpu: FlashAttention-style online softmax. Keys are taken in fixed groups of kKeyTile
// positions (absolute: [16j, 16j + 16)), in ascending order; per group a row's scores, running
// max, rescale and weighted sum of V are one fixed chain, whatever else is computed with it
// (kernels/cpu/attend_tile.h writes it out operation by operation; its AVX-512 and AVX2 bodies,
// chosen with the GEMM's by SetGemmIsa, and its scalar body give the same bits). Rows of one
// session that follow each other (a prefill) are processed kQueryTile at a time against each key
// group, so a K/V row is read once per tile instead of once per query; one task per tile and slice
// of heads (a batch-1 decode row's heads are sliced over the threads). The tiling and the slicing
// only choose which chains run together, so a row's result does not depend on the batch, on the
// split of a prompt, on the pool's block size or on the thread count (bitwise). kCuda: kF32 only.
inline constexpr int kKeyTile = 16;
inline constexpr int kQueryTile = 16;
template <Device D>
void PagedAttention(const PagedKv& kv, const int32_t* tables, const PagedRow* rows, int64_t n,
                    const float* qkv, int64_t stride, float* out, int64_t out_stride, int layer,
                    const AttentionShape& shape, const Parallel& par);

}  // namespace flatstate

#endif  // FLATSTATE_KERNELS_PAGED_ATTENTION_H_
