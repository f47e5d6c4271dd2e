// Element-wise parts of the recurrent families' token mixers (Gated DeltaNet, GLA, Mamba-2):
// SiLU after their short convolution, the decay and write-strength gates of the gated delta
// rule, the gated per-head RMSNorm before their output projection, and the sigmoid output gate of
// the hybrids' softmax layers. Row-major fp32; rows are
// independent (batch invariant). Pointers are in the op's device memory. CPU bodies in
// cpu/recurrent_gates.cc; CUDA bodies in cuda/recurrent_gates.cu (asynchronous on
// cuda::Stream(); compiled, not yet run on a GPU).
#ifndef FLATSTATE_KERNELS_RECURRENT_GATES_H_
#define FLATSTATE_KERNELS_RECURRENT_GATES_H_

#include <cstdint>

#include "kernels/device.h"

namespace flatstate {

// x = x / (1 + exp(-x)) in place, the first `dim` floats of `rows` rows of stride `stride`.
template <Device D>
void SiluRows(float* x, int64_t rows, int64_t stride, int64_t dim);

// The gated delta rule's gates (transformers' Qwen3-Next / Qwen3.5 GatedDeltaNet): for row r and
// head h < heads, with a = a_in[r * in_stride + h] and b likewise,
//   g[r * out_stride + h]    = -exp(A_log[h]) * softplus(a + dt_bias[h])
//   beta[r * out_stride + h] = sigmoid(b)
// softplus(x) = log(1 + exp(x)), and x itself above 20 (torch's threshold).
template <Device D>
void DeltaGates(const float* a_in, const float* b_in, int64_t in_stride, int64_t rows, int heads,
                const float* A_log, const float* dt_bias, float* g, float* beta,
                int64_t out_stride);

// x[r][i] *= sigmoid(gate[r * gate_stride + i]), i < dim, for `rows` rows of stride x_stride (the
// output gate of Qwen3.5 / Qwen3-Next softmax layers).
template <Device D>
void SigmoidMulRows(float* x, int64_t x_stride, const float* gate, int64_t gate_stride,
                    int64_t rows, int64_t dim);

// Gated per-head RMSNorm in place (Qwen3-Next's RMSNormGated, fla's FusedRMSNormGated): for each
// row r and head h, with x_h the head_dim floats at x + r * x_stride + h * head_dim and z_h at
// z + r * z_stride + h * head_dim,
//   x_h = x_h * rsqrt(mean(x_h^2) + eps) * weight * silu(z_h)   (weight: head_dim floats).
template <Device D>
void GatedHeadRmsNorm(float* x, int64_t x_stride, const float* z, int64_t z_stride, int64_t rows,
                      int heads, int head_dim, const float* weight, float eps);

}  // namespace flatstate

#endif  // FLATSTATE_KERNELS_RECURRENT_GATES_H_
