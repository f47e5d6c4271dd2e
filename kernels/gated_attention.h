// Gated random feature attention (RFA-Gate, Peng et al. 2021; docs/kinds.md "gated"): per
// (sequence, head) an fp32 state S [F][hd], z [F] and the weight mass n, updated by a
// data-dependent scalar gate g = sigmoid(a):
//   S = g S + (1 - g) phi(k) v^T,  z = g z + (1 - g) phi(k),  n = g n + (1 - g)
//   o = phi(q)^T S / max(phi(q) . z, kGatedDenFloor * n)
// with phi RFA's random Fourier features of the L2-normalised q / k: u = rfa_scale * W x,
// phi = sqrt(1/R) [sin u, cos u] (F = 2R; W = LinearHead::feature_proj, [R][hd]).
//
// The op takes a LinearBatch (kernels/linear_attention.h) whose heads carry feature_proj,
// rfa_scale and gate_bias and whose `gate` points at the gate logits; M's slot (m_off) holds n.
// A 1-token run uses the recurrent step; a longer one the chunked form with cumulative log gates
// (GLA / flash-linear-attention style, every exponent <= 0), chunks aligned to absolute multiples
// of `chunk` so that splitting a prompt at such multiples changes no float. The two forms agree
// up to fp32 rounding (tests/kernels/gated_attention_test.cc).
//
// kCpu body (cpu/gated_attention.cc): one task per (sequence, head) on `par`, per-thread
// scratch. kCuda body (cuda/gated_attention.cu): one block per (sequence, head), asynchronous on
// cuda::Stream(); it runs every token through the recurrent step (no chunked form on the GPU
// yet), which agrees with the CPU's chunked prefill up to fp32 rounding.
#ifndef FLATSTATE_KERNELS_GATED_ATTENTION_H_
#define FLATSTATE_KERNELS_GATED_ATTENTION_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/device.h"
#include "kernels/linear_attention.h"
#include "kernels/parallel.h"

namespace flatstate {

// The denominator's floor relative to the weight mass: a constant of the kind (docs/kinds.md).
inline constexpr float kGatedDenFloor = 0.01f;
// q and k are divided by max(|x|, kGatedNormFloor).
inline constexpr float kGatedNormFloor = 1e-6f;

// OK when D's kernels take this shape (head_dim <= kMaxHeadDim; kCuda: its shared memory for
// head_dim and feature_dim fits 48 KiB). InvalidArgument naming the limit otherwise.
template <Device D>
absl::Status CheckGatedAttentionShape(int head_dim, int feature_dim);

// Floats of scratch one (sequence, head) of the CPU body needs for T tokens.
size_t GatedAttentionScratch(int head_dim, int feature_dim, int64_t T, int chunk);

// Updates every sequence's S, z, n and writes its output rows. Sequences must not share state.
template <Device D>
void GatedAttention(const LinearBatch& b, const Parallel& par);

// The CPU body of one (sequence, head): q, k, v row t at q + t * in_stride, its gate logit at
// gate[t * in_stride]; positions pos0 .. pos0 + T - 1. Host memory. Thread-compatible.
void GatedAttentionCpu(const LinearHead& h, const float* q, const float* k, const float* v,
                       const float* gate, int64_t in_stride, int64_t T, int64_t pos0, int chunk,
                       float* S, float* z, float* n, float* out, int64_t out_stride,
                       float* scratch);

}  // namespace flatstate

#endif  // FLATSTATE_KERNELS_GATED_ATTENTION_H_
