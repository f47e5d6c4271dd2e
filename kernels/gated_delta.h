// The gated delta rule: Gated DeltaNet (the linear layers of Qwen3.5 and Qwen3-Next, fla's
// `gated_deltanet`) and, with g = 0, DeltaNet. Per (sequence, value head) an fp32 state
// S [key_dim][value_dim]; per token t, with q and k L2-normalised (x / sqrt(sum x^2 + 1e-6), when
// l2norm_qk) and q scaled by `scale`:
//   S <- exp(g_t) S;  u = beta_t (v_t - S^T k_t);  S <- S + k_t u^T;  o_t = S^T q_t
// (fla-org/flash-linear-attention fla/ops/gated_delta_rule/naive.py; transformers
// models/qwen3_next torch_recurrent_gated_delta_rule). Grouped heads: value head h reads key head
// h / (Hv / Hk) (transformers' repeat_interleave of q and k).
//
// Two forms. Recurrent (T == 1): the three steps above, fused in two passes over S. Chunked
// (T > 1): chunks of `chunk` tokens aligned to absolute positions (multiples of `chunk`), each in
// the WY / UT form: with G_t = sum of g over the chunk up to t, S_0 the state at the chunk's start
// and A[t][s] = beta_t exp(G_t - G_s) (k_t . k_s) for s < t, the pseudo-values U solve
// (I + A) U = diag(beta) (V - diag(exp G) K S_0) by forward substitution; then
//   o_t = exp(G_t) S_0^T q_t + sum_{s<=t} exp(G_t - G_s) (q_t . k_s) u_s
//   S_L = exp(G_L) S_0 + sum_s exp(G_L - G_s) k_s u_s^T.
// Both forms compute the same function; they agree to fp32 rounding
// (tests/kernels/gated_delta_test.cc states the tolerance). Each (sequence, head) is computed
// alone, in a fixed order, so a sequence's outputs and state are bitwise independent of the batch
// and the thread, and splitting a run at multiples of `chunk` changes no float.
//
// The op is GatedDeltaRule<D> over a GatedDeltaBatch: every (sequence, value head) of one layer
// of a step. kCpu body: one task per (sequence, head) on `par` with per-thread scratch. kCuda
// body (cuda/gated_delta.cu): decode sequences in the recurrent form, one block per (sequence,
// value head, 32 value columns) with the state tile in registers; prefill sequences in the
// chunked form, a block per (sequence, value head, 32 value columns) with the chunk's tiles in
// shared memory, on the chunk halved while over 64 or too large for them (64 x 256 keys fits on
// sm_90; if none fits, recurrent); with the environment variable
// FLATSTATE_CUDA_DELTA_PREFILL=recurrent (read once), always recurrent (for benchmarks).
// docs/gpu.md says where each ran.
#ifndef FLATSTATE_KERNELS_GATED_DELTA_H_
#define FLATSTATE_KERNELS_GATED_DELTA_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/device.h"
#include "kernels/linear_attention.h"
#include "kernels/parallel.h"

namespace flatstate {

// The largest key_dim / value_dim the kernels take.
inline constexpr int kMaxDeltaHeadDim = 512;

template <Device D>
absl::Status CheckGatedDeltaShape(int key_heads, int value_heads, int key_dim, int value_dim,
                                  int chunk);

// Floats of scratch one (sequence, head) needs for T tokens.
size_t GatedDeltaScratch(int key_dim, int value_dim, int64_t T, int chunk);

// Every (sequence, value head) of one layer (GroupedHeadBatch, kernels/linear_attention.h); value
// head h's g and beta at g[r * gb_stride + h], beta[r * gb_stride + h]. scale: key_dim^-0.5
// upstream.
struct GatedDeltaBatch : GroupedHeadBatch {
  bool l2norm_qk = true;
  const float* g = nullptr;     // log decay (<= 0); null: no decay (DeltaNet)
  const float* beta = nullptr;  // in [0, 1] upstream (a sigmoid)
  int64_t gb_stride = 0;
};

template <Device D>
void GatedDeltaRule(const GatedDeltaBatch& b, const Parallel& par);

// The CPU body of one (sequence, value head): rows t = 0 .. T-1 at the given pointers plus t
// times their strides; positions pos0 .. pos0 + T - 1 (the chunk grid); g may be null. Updates S
// [key_dim][value_dim]; `scratch` holds GatedDeltaScratch(key_dim, value_dim, T, chunk) floats.
// Thread-compatible: different (sequence, head) pairs may run on different threads.
void GatedDeltaRuleCpu(int key_dim, int value_dim, float scale, bool l2norm_qk, const float* q,
                       const float* k, int64_t qk_stride, const float* v, int64_t v_stride,
                       const float* g, const float* beta, int64_t gb_stride, int64_t T,
                       int64_t pos0, int chunk, float* S, float* out, int64_t out_stride,
                       float* scratch);

}  // namespace flatstate

#endif  // FLATSTATE_KERNELS_GATED_DELTA_H_
