// Softmax attention of one query head over a paged KV cache (vLLM's PagedAttention layout).
//
// PagedKv describes the engine's block pool memory without owning it: block b holds, for every
// layer l, K then V, each [block_size][hidden] fp32 — i.e. row (b, l, kv, slot) starts at
//   base + (((b * num_layers + l) * 2 + kv) * block_size + slot) * hidden.
// Token t of a sequence lives in block table[t / block_size], slot t % block_size.
// Thread-compatible: different (sequence, head) pairs may run on different threads.
#ifndef FLATSTATE_KERNELS_PAGED_ATTENTION_H_
#define FLATSTATE_KERNELS_PAGED_ATTENTION_H_

#include <cstdint>

#include "kernels/device.h"

namespace flatstate {

struct PagedKv {
  float* base = nullptr;
  int block_size = 16;
  int num_layers = 0;
  int hidden = 0;

  float* Row(int32_t block, int layer, int kv, int slot) const {
    return base + (((static_cast<int64_t>(block) * num_layers + layer) * 2 + kv) * block_size +
                   slot) * static_cast<int64_t>(hidden);
  }
  float* Key(const int32_t* table, int layer, int64_t t) const {
    return Row(table[t / block_size], layer, 0, static_cast<int>(t % block_size));
  }
  float* Value(const int32_t* table, int layer, int64_t t) const {
    return Row(table[t / block_size], layer, 1, static_cast<int>(t % block_size));
  }
};

// out[hd] = softmax(q . K[0..ctx) / sqrt(hd)) V[0..ctx) for head `head` of `layer`, where q is
// that head's hd floats. scratch holds ctx floats.
template <Device D>
void PagedAttention(const PagedKv& kv, const int32_t* table, int layer, int head, int head_dim,
                    const float* q, int64_t ctx, float* out, float* scratch);

// All `heads` heads of one query row at once: q and out hold heads * head_dim floats. Reads each
// K and V row once (a per-head loop would stream the whole cache once per head). Per head, the
// arithmetic is exactly PagedAttention's. scratch holds heads * ctx floats.
template <Device D>
void PagedAttentionAllHeads(const PagedKv& kv, const int32_t* table, int layer, int heads,
                            int head_dim, const float* q, int64_t ctx, float* out,
                            float* scratch);

}  // namespace flatstate

#endif  // FLATSTATE_KERNELS_PAGED_ATTENTION_H_
