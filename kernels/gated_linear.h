// The gated linear recurrence: GLA (per-key decay), RetNet / Mamba-2-style (one decay per head)
// and, with no decay, plain linear attention without normaliser. Per (sequence, value head) an
// fp32 state S [key_dim][value_dim]; per token t, with q scaled by `scale`:
//   S <- diag(exp(g_t)) S + k_t v_t^T;   o_t = S^T q_t
// where g_t is the head's log decay: a key_dim vector (per_key_decay, GLA's gk) or one number
// (a scalar decay broadcast over the keys). (fla-org/flash-linear-attention
// fla/ops/gla/naive.py; Mamba-2's SSD recurrence is this with k = B, v = dt x, q = C, scale 1.)
// Grouped heads: value head h reads key head h / (Hv / Hk) for q and k (Mamba-2's groups); g is
// per value head.
//
// Two forms. Recurrent (T == 1): one pass over S. Chunked (T > 1): chunks of `chunk` tokens
// aligned to absolute positions, each with B_t = the sum of g over the chunk up to t:
//   o_t = (q_t * exp(B_t))^T S_0 + sum_{s<=t} (sum_i q_t[i] k_s[i] exp(B_t[i] - B_s[i])) v_s
//   S_L = diag(exp(B_L)) S_0 + sum_s (k_s * exp(B_L - B_s)) v_s^T,
// every exponent a sum of log decays, so <= 0 and never overflowing. With one decay per head
// (Mamba-2) the CPU chunk is small matrix products (Q S_0, Q K^T masked and weighed by
// exp(B_t - B_s), that times V, K^T times the weighed V; kernels/cpu/small_matmul.h), with a
// decay per key it is per-row loops. Both forms compute the same
// function to fp32 rounding (tests/kernels/gated_linear_test.cc); each (sequence, head) is
// computed alone in a fixed order, so results are bitwise independent of the batch and the
// threads, and splitting a run at multiples of `chunk` changes no float.
//
// The op is GatedLinear<D> over a GatedLinearBatch. kCpu body: one task per (sequence, head) on
// `par` with per-thread scratch, compiled as target clones (x86-64-v4, x86-64-v3 = AVX2 + FMA,
// baseline; chosen once by the CPU; not under ASan). kCuda body (cuda/gated_linear.cu): the
// recurrent form for decode, the chunked form (on a chunk dividing `chunk`, at most 64) for
// prefill, within the tolerance of the CPU's (tests/kernels/device_recurrent_test.cc).
#ifndef FLATSTATE_KERNELS_GATED_LINEAR_H_
#define FLATSTATE_KERNELS_GATED_LINEAR_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/device.h"
#include "kernels/linear_attention.h"
#include "kernels/parallel.h"

namespace flatstate {

template <Device D>
absl::Status CheckGatedLinearShape(int key_heads, int value_heads, int key_dim, int value_dim,
                                   int chunk);

// Floats of scratch one (sequence, head) needs for T tokens.
size_t GatedLinearScratch(int key_dim, int value_dim, int64_t T, int chunk);

// Every (sequence, value head) of one layer (GroupedHeadBatch, kernels/linear_attention.h); value
// head h's log decay at g + r*g_stride + h*key_dim (per_key_decay) or g + r*g_stride + h.
struct GatedLinearBatch : GroupedHeadBatch {
  bool per_key_decay = true;
  const float* g = nullptr;  // log decays (<= 0); null: none
  int64_t g_stride = 0;
};

template <Device D>
void GatedLinear(const GatedLinearBatch& b, const Parallel& par);

// The CPU body of one (sequence, value head): rows t at the given pointers plus t times their
// strides, positions pos0 .. pos0 + T - 1 (the chunk grid); g points at this head's decay (a
// key_dim vector or one number per row, per `per_key_decay`) or is null. Updates S
// [key_dim][value_dim]; `scratch` holds GatedLinearScratch(key_dim, value_dim, T, chunk) floats.
// Thread-compatible.
void GatedLinearCpu(int key_dim, int value_dim, float scale, bool per_key_decay, const float* q,
                    const float* k, int64_t qk_stride, const float* v, int64_t v_stride,
                    const float* g, int64_t g_stride, int64_t T, int64_t pos0, int chunk, float* S,
                    float* out, int64_t out_stride, float* scratch);

}  // namespace flatstate

#endif  // FLATSTATE_KERNELS_GATED_LINEAR_H_
