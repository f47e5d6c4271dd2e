// Row-wise and element-wise ops of the transformer block: RMSNorm, exact GELU, residual add,
// the token-shift causal convolution and rotary position embeddings. Row-major fp32; every row is
// computed independently (batch invariant). Declared once here; CPU bodies in elementwise_cpu.cc.
#ifndef FLATSTATE_KERNELS_ELEMENTWISE_H_
#define FLATSTATE_KERNELS_ELEMENTWISE_H_

#include <cstdint>

#include "kernels/device.h"

namespace flatstate {

// y[r] = x[r] * rsqrt(mean(x[r]^2) + eps) * weight, for `rows` rows of `dim` floats (y may be x).
template <Device D>
void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* y);

// x = 0.5 x (1 + erf(x / sqrt 2)), in place.
template <Device D>
void Gelu(float* x, int64_t n);

// y += x.
template <Device D>
void AddInPlace(float* y, const float* x, int64_t n);

// Causal depthwise convolution of one sequence ("token shift"): for t in [0, T), channel c,
//   out[t][c] = sum_{i<K} w[c][i] * full[t + i][c],  full = [window (K-1 rows, oldest first); in].
// `window` is then replaced by the last K-1 rows of `full`. w is [dim, K]. out must not alias in.
template <Device D>
void CausalConv(const float* in, int64_t T, int64_t dim, int K, const float* w, float* window,
                float* out);

// Rotate-half RoPE in place on `T` rows (row stride `stride` floats), each holding `heads` heads
// of `head_dim`, for absolute positions pos0, pos0 + 1, ...
template <Device D>
void Rope(float* x, int64_t T, int64_t stride, int64_t pos0, int heads, int head_dim,
          float theta);

}  // namespace flatstate

#endif  // FLATSTATE_KERNELS_ELEMENTWISE_H_
