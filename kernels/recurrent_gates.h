// Element-wise parts of the recurrent families' token mixers (Gated DeltaNet, DeltaNet, GLA,
// Mamba-2): SiLU after their short convolution, the decay and write-strength gates of the gated
// delta rule (DeltaNet's write strengths alone), GLA's per-key decays, Mamba-2's step sizes,
// per-head scaling, the gated per-head RMSNorm before their output projection, and the sigmoid
// output gate of the hybrids' softmax layers. Row-major fp32; rows are independent (batch
// invariant). Pointers are in the op's device memory. CPU bodies in cpu/recurrent_gates.cc; CUDA
// bodies in cuda/recurrent_gates.cu (asynchronous on cuda::Stream(); run on an H200 on 2026-11-26:
// tests/kernels/device_recurrent_test.cc and the HF folders of engine_device_hf_test.cc).
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

// DeltaNet's write strengths (fla's DeltaNet layer, no decay): for row r and head h < heads,
//   beta[r * out_stride + h] = scale * sigmoid(b_in[r * in_stride + h])   (b_in null: scale)
// (scale 2: fla's allow_neg_eigval; b_in null: use_beta false).
template <Device D>
void DeltaBeta(const float* b_in, int64_t in_stride, int64_t rows, int heads, float scale,
               float* beta, int64_t out_stride);

// x[r][i] *= sigmoid(gate[r * gate_stride + i]), i < dim, for `rows` rows of stride x_stride (the
// output gate of Qwen3.5 / Qwen3-Next softmax layers).
template <Device D>
void SigmoidMulRows(float* x, int64_t x_stride, const float* gate, int64_t gate_stride,
                    int64_t rows, int64_t dim);

// GLA's per-key log decays in place (fla's GatedLinearAttention): for row r and i < dim,
//   x = x[r * stride + i] + bias[i];
//   x[r * stride + i] = max(logsigmoid(x) / normalizer, clamp_min)
// logsigmoid(x) = min(x, 0) - log1p(exp(-|x|)) (no overflow for any x); every result <= 0.
template <Device D>
void GlaGates(float* x, int64_t rows, int64_t stride, int64_t dim, const float* bias,
              float normalizer, float clamp_min);

// Mamba-2's step sizes and log decays (transformers' Mamba2Mixer): for row r and head h < heads,
//   dt[r * out_stride + h] = clamp(softplus(dt_in[r * in_stride + h] + dt_bias[h]), dt_min,
//                                  dt_max)
//   g[r * out_stride + h]  = -exp(A_log[h]) * dt
// softplus as DeltaGates'.
template <Device D>
void SsmGates(const float* dt_in, int64_t in_stride, int64_t rows, int heads, const float* A_log,
              const float* dt_bias, float dt_min, float dt_max, float* g, float* dt,
              int64_t out_stride);

// Per-head scaling: for row r, head h and i < head_dim, with s_rh = s[r * s_stride + h],
//   ScaleHeads:     out[r * out_stride + h * head_dim + i] = s_rh * x[r * x_stride + h * head_dim +
//   i] AddScaledHeads: y[r * y_stride + h * head_dim + i] += s[h] * x[r * x_stride + h * head_dim +
//   i]
// (Mamba-2: v = dt x into the scan, and the skip y += D x; s is per row there, per head here).
template <Device D>
void ScaleHeads(const float* x, int64_t x_stride, const float* s, int64_t s_stride, int64_t rows,
                int heads, int head_dim, float* out, int64_t out_stride);
template <Device D>
void AddScaledHeads(float* y, int64_t y_stride, const float* x, int64_t x_stride, const float* s,
                    int64_t rows, int heads, int head_dim);

// The order of GatedHeadRmsNorm: Qwen3-Next's RMSNormGated (fla's FusedRMSNormGated) normalises
// then gates; Mamba-2's (transformers MambaRMSNormGated, mamba_ssm norm_before_gate=False) gates
// then normalises.
enum class GateOrder { kNormThenGate, kGateThenNorm };

// Gated per-head RMSNorm in place: for each row r and head h, with x_h the head_dim floats at
// x + r * x_stride + h * head_dim, z_h likewise at z + r * z_stride + h * head_dim, and w_h the
// head_dim floats at weight + h * weight_stride (weight_stride 0: one weight for every head),
//   kNormThenGate: x_h = x_h * rsqrt(mean(x_h^2) + eps) * w_h * silu(z_h)
//   kGateThenNorm: u = x_h * silu(z_h); x_h = u * rsqrt(mean(u^2) + eps) * w_h
// The mean of squares accumulates in double.
template <Device D>
void GatedHeadRmsNorm(float* x, int64_t x_stride, const float* z, int64_t z_stride, int64_t rows,
                      int heads, int head_dim, const float* weight, int64_t weight_stride,
                      float eps, GateOrder order);

}  // namespace flatstate

#endif  // FLATSTATE_KERNELS_RECURRENT_GATES_H_
