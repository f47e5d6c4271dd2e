// Linear attention for one (sequence, head): feature maps, the recurrent step (decode) and the
// chunked-parallel form (prefill), over an fp32 state S [F][hd], z [F], M (a scalar).
//
// The math is tools/flatstate_ref/model.py's core, term for term. With per-key log-stabilisers
// m_j (zero for every map but FAVOR+) and the running max M_i = max(M_prev, m_..i), key j weighs
// fk_j * exp(m_j - M_i) as seen from row i; S and z are stored relative to M and are rescaled by
// exp(M_old - M_new) when M grows (exp(-inf) = 0 for a fresh FAVOR+ state). Outputs:
//   o_i = (fq_i^T S_i) / (fq_i . z_i + eps)   (no denominator for cosine).
// Recurrent (T == 1) and chunked (T > 1) forms agree up to fp32 rounding. Chunks are aligned to
// absolute positions (multiples of `chunk`), so splitting a prompt at such multiples never changes
// a single float
// (tests/kernels/linear_attention_test.cc). Thread-compatible: callers run different
// (sequence, head) pairs on different threads.
#ifndef FLATSTATE_KERNELS_LINEAR_ATTENTION_H_
#define FLATSTATE_KERNELS_LINEAR_ATTENTION_H_

#include <cstddef>
#include <cstdint>

#include "kernels/device.h"

namespace flatstate {

enum class FeatureMap { kEluPlusOne, kCosformer, kCosine, kFavor };

struct LinearHead {
  FeatureMap map = FeatureMap::kEluPlusOne;
  int head_dim = 0;               // q, k, v length
  int feature_dim = 0;            // F: hd, 2*hd (cosformer) or favor_num_features
  float eps = 1e-6f;
  bool use_den = true;            // false for cosine
  double cosformer_step = 0;      // pi / (2 * horizon)
  double cosine_exponent = 0;     // sigmoid(m_h): values scaled by t^-exponent, t = pos + 1
  const float* favor_proj = nullptr;  // [F, hd]
};

// Floats of scratch LinearAttention needs for T tokens with chunk size `chunk`.
size_t LinearAttentionScratch(const LinearHead& h, int64_t T, int chunk);

// q, k, v: row t at q + t * in_stride (this head's slice); positions pos0 .. pos0 + T - 1.
// Updates S, z, *M; writes row t of the output at out + t * out_stride.
template <Device D>
void LinearAttention(const LinearHead& h, const float* q, const float* k, const float* v,
                     int64_t in_stride, int64_t T, int64_t pos0, int chunk, float* S, float* z,
                     float* M, float* out, int64_t out_stride, float* scratch);

}  // namespace flatstate

#endif  // FLATSTATE_KERNELS_LINEAR_ATTENTION_H_
