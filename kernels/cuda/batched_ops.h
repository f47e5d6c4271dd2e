// Batched CUDA launchers the engine's device forward pass (engine/runtime/forward_cuda.h) uses so
// that one kernel covers every session of a step, instead of one launch per (session, head) like
// the single-call op APIs in kernels/<op>.h. Same math as the CPU bodies, op for op.
//
// Every function enqueues work on cuda::Stream() and returns at once; launch failures are recorded
// in the CUDA context (kernels/cuda/context.h) and surface at the caller's cuda::Synchronize().
// All pointers are device pointers, including the descriptor arrays, unless stated otherwise.
// Thread-compatible like the rest of the CUDA backend. Only compiled with FLATSTATE_HAVE_CUDA.
#ifndef FLATSTATE_KERNELS_CUDA_BATCHED_OPS_H_
#define FLATSTATE_KERNELS_CUDA_BATCHED_OPS_H_

#include <cstddef>
#include <cstdint>

#include "kernels/linear_attention.h"

namespace flatstate::cuda {

// Threads per block of the linear-attention kernels. The recurrent step, the feature maps and the
// prefill share this block shape and the same (non-inlined) device functions, so a token gives
// bit-identical floats whether it ran in the decode kernel or as a 1-token prefill chunk.
inline constexpr int kLinearThreads = 128;

// One sequence of a batched linear-attention call.
struct LinearSeq {
  int64_t row = 0;       // first row in qkv / out
  int64_t T = 0;         // tokens this call
  int64_t pos0 = 0;      // absolute position of the first token
  float* state = nullptr;  // this sequence's state; the layer's slice is at state + layer_offset
  int64_t scratch = 0;     // prefill only: offset (floats) of this sequence's scratch
  int64_t head_scratch = 0;  // prefill only: floats per head (LinearAttentionScratch(h, T, chunk))
};

struct LinearBatch {
  const LinearHead* heads = nullptr;  // [H] device array; favor_proj are device pointers
  int H = 0;
  // Row r, head h: q at q + r*in_stride + h*hd (same for k, v); output at
  // out + r*out_stride + h*hd.
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t in_stride = 0;
  float* out = nullptr;
  int64_t out_stride = 0;
  const LinearSeq* seqs = nullptr;  // [B] device array
  int B = 0;
  int64_t layer_offset = 0;  // floats from LinearSeq::state to this layer's slice
  int64_t s_off = 0, z_off = 0, m_off = 0;  // S [H][F][hd], z [H][F], M [H] inside the slice
  // Single-call mode (LinearAttention<kCuda>: B == 1, H == 1): when S is set, the state is
  // S/z/M directly and LinearSeq::state is ignored.
  float* S = nullptr;
  float* z = nullptr;
  float* M = nullptr;
  int chunk = 64;
};

// Dynamic shared memory the kernels need; callers check it against the device limit (48 KiB
// without opt-in) before launching. 0 means "too large" never happens below 48 KiB for
// head_dim <= 1024 and feature_dim <= 2048.
size_t LinearDecodeSmemBytes(int head_dim, int feature_dim);
size_t LinearPrefillSmemBytes(int head_dim, int chunk);

// Fused recurrent decode: every sequence of `b` has T == 1. One block per (sequence, head):
// features, state update and readout in one pass over S (fp32).
void LinearDecode(const LinearBatch& b, int head_dim, int feature_dim);

// Chunked prefill for sequences with any T >= 1 (exactly the CPU's LinearAttention semantics:
// chunks on absolute multiples of b.chunk, 1-token chunks through the recurrent step).
// `rows` = sum of the sequences' T; prefill row i is token row_t[i] of sequence row_seq[i] (both
// [rows] device arrays; both may be null when B == 1, meaning row i is token i). `workspace`
// holds each sequence's scratch at LinearSeq::scratch, head h at + h * head_scratch, laid out as
// the CPU's: fq [T][F], fk [T][F], m [T], Mi [T], vv [T][hd], A [L][L].
void LinearPrefill(const LinearBatch& b, int head_dim, int feature_dim, const int32_t* row_seq,
                   const int64_t* row_t, int64_t rows, float* workspace);

// One row of a batched softmax call: query row, context length (the row's position + 1) and the
// offset of its session's block table in the concatenated `tables` array.
struct PagedRow {
  int64_t row = 0;
  int64_t ctx = 0;
  int64_t table = 0;
};

struct PagedPool {
  float* base = nullptr;
  int block_size = 16;
  int num_layers = 0;
  int hidden = 0;
};

// RoPE on q and k of every row (positions rows[i].ctx - 1), then K/V of every row written into
// the pool at its position. qkv row r: q at r*stride, k at +hidden, v at +2*hidden.
void RopeAndWriteKv(const PagedPool& pool, const int32_t* tables, const PagedRow* rows,
                    int64_t n, float* qkv, int64_t stride, int layer, int heads, int head_dim,
                    float theta);

// Shared memory per PagedAttentionRows block (hd <= 1024 gives < 21 KiB).
size_t PagedAttentionSmemBytes(int head_dim);

// out row r, head h = softmax attention of q (qkv row r, head h) over the row's context.
void PagedAttentionRows(const PagedPool& pool, const int32_t* tables, const PagedRow* rows,
                        int64_t n, const float* qkv, int64_t stride, float* out,
                        int64_t out_stride, int layer, int heads, int head_dim);

// One sequence of a batched causal convolution: rows [row, row + T) of in/out, and its window
// (K-1 rows of dim floats) at window + layer_offset.
struct ConvSeq {
  int64_t row = 0;
  int64_t T = 0;
  float* window = nullptr;
};
void CausalConvBatch(const float* in, int64_t dim, int K, const float* w, const ConvSeq* seqs,
                     int B, int64_t layer_offset, float* out);

// dst[i] = src[idx[i]] for rows of `dim` floats (embedding lookup, row gather).
void GatherRows(const float* src, const int32_t* idx, int64_t n, int64_t dim, float* dst);

}  // namespace flatstate::cuda

#endif  // FLATSTATE_KERNELS_CUDA_BATCHED_OPS_H_
