// Row-wise and element-wise ops of the transformer block: RMSNorm, LayerNorm, exact GELU, SwiGLU,
// residual and bias adds, the token-shift causal convolution and the row gather (embedding lookup).
// Row-major fp32; every row is computed independently (batch invariant). All pointers, descriptor
// arrays included, are in the op's device memory. CPU bodies in cpu/elementwise.cc; CUDA bodies in
// cuda/elementwise.cu (asynchronous on cuda::Stream()). RoPE is part of kernels/paged_attention.h's
// RopeAndWriteKv.
#ifndef FLATSTATE_KERNELS_ELEMENTWISE_H_
#define FLATSTATE_KERNELS_ELEMENTWISE_H_

#include <cstdint>

#include "kernels/device.h"

namespace flatstate {

// y[r] = x[r] * rsqrt(mean(x[r]^2) + eps) * weight, for `rows` rows of `dim` floats (y may be x).
template <Device D>
void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* y);

// LayerNorm: y[r] = (x[r] - mean) * rsqrt(var + eps) * weight + bias (biased variance; bias may
// be null), for `rows` rows of `dim` floats (y may be x). Mean and variance accumulate in double.
template <Device D>
void LayerNorm(const float* x, const float* weight, const float* bias, int64_t rows, int64_t dim,
               float eps, float* y);

// x = 0.5 x (1 + erf(x / sqrt 2)), in place.
template <Device D>
void Gelu(float* x, int64_t n);

// y += x.
template <Device D>
void AddInPlace(float* y, const float* x, int64_t n);

// Per-head RMSNorm in place (Qwen3's q_norm / k_norm): for each of `rows` rows (stride `stride`
// floats) and each of its `heads` consecutive heads of head_dim floats at the row's start,
// x = x * rsqrt(mean(x^2) + eps) * weight (weight: head_dim floats, shared by the heads).
template <Device D>
void HeadRmsNorm(float* x, int64_t rows, int64_t stride, int heads, int head_dim,
                 const float* weight, float eps);

// y[r][c] += bias[c] for `rows` rows of `dim` floats (a GEMM's bias, added after it).
template <Device D>
void AddBias(float* y, const float* bias, int64_t rows, int64_t dim);

// SwiGLU: out[r][i] = silu(in[r][i]) * in[r][F + i], i < F, silu(x) = x / (1 + exp(-x)); each
// input row is [gate (F floats); up (F floats)] (one GEMM of the fused gate and up weights), out
// rows are F floats and must not alias in.
template <Device D>
void SwiGlu(const float* in, int64_t rows, int64_t F, float* out);

// One sequence of a batched causal convolution: rows [row, row + T) of in / out, and its window
// (K-1 rows of dim floats, oldest first) at window + layer_offset.
struct ConvSeq {
  int64_t row = 0;
  int64_t T = 0;
  float* window = nullptr;
  // Null, or (a speculative step's stepwise sequence, CPU only) where the window after each
  // token t < T - 1 goes: steps + t * steps_stride + layer_offset (LinearSeq::steps).
  float* steps = nullptr;
  int64_t steps_stride = 0;
};

// Causal depthwise convolution ("token shift") of B sequences: for each, t in [0, T), channel c,
//   out[t][c] = sum_{i<K} w[c][i] * full[t + i][c],  full = [window (K-1 rows); in].
// Each window is then replaced by the last K-1 rows of its `full`. w is [dim, K]. out must not
// alias in; sequences must not share windows.
template <Device D>
void CausalConv(const float* in, int64_t dim, int K, const float* w, const ConvSeq* seqs, int B,
                int64_t layer_offset, float* out);

// dst[i] = src[idx[i]] for n rows of `dim` floats.
template <Device D>
void GatherRows(const float* src, const int32_t* idx, int64_t n, int64_t dim, float* dst);

}  // namespace flatstate

#endif  // FLATSTATE_KERNELS_ELEMENTWISE_H_
